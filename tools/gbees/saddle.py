#!/usr/bin/env python3
"""How fast finite-volume schemes let mass leave the Lorenz '63 saddle.

Usage: saddle.py [--z Z] [--offset D] [--aligned] [--columns T] [SCHEME ...]

Near the z-axis, at a fixed height z, the Lorenz '63 field of dakit's model
(s = 4) is the linear saddle u = 4 (y - x), v = -y - x z (at z = -25 its
rates are +7.6 and -12.6). This carries a Gaussian of standard deviation
0.6, started 2.5 units up the stable direction, on a 41 x 41 grid of cell
width 0.5 (GBEES's dx for the validation case), and prints every 0.1 time
units the probability in the 3 x 3 cells around the axis (|x|, |y| < 0.75)
beside the exact value (400 000 samples moved by the flow map) and the rate
at which each decays. The exact one decays at the unstable rate.

A linear field makes the scheme's rates independent of the cell width
(velocities scale with it), so what this prints holds at every dx.

--columns T prints instead, at time T, the probability in each x column
with |x| < 2.5 beside the exact one: on the offset lattice the mass that
reaches the stable manifold within a cell goes to the branch on whose side
that cell's centre lies, where the exact flow splits it.

Schemes: centre (donor cell, each face's velocity at its centre: GBEES's
first-order flux), split (donor cell with the outflow and inflow parts of
the velocity averaged over 8 points of the face), muscl (split with
MC-limited slopes along the face normal, SSP-RK2 in time), muscl-t (muscl
plus the transverse slopes across the face). Default: all four.
--offset D moves the lattice by D along x and y (0.25: no cell is centred
on the axis). --aligned turns the saddle onto the grid's axes (u = r+ x,
v = r- y with the same rates r+ and r-), where each scheme leaves at the
exact rate.
"""
import sys
from math import erf

try:
    import numpy as np
    from scipy.linalg import expm
except ImportError as e:
    sys.exit(f"saddle.py needs numpy and scipy ({e}; apt-get install python3-numpy python3-scipy)")

SCHEMES = ("centre", "split", "muscl", "muscl-t")


def mc_slope(d1, d2):
    lim = np.minimum(np.minimum(2 * abs(d1), 2 * abs(d2)), 0.5 * abs(d1 + d2))
    return np.where(d1 * d2 > 0, np.sign(d1) * lim, 0.0)


class Saddle:
    def __init__(self, z, offset, aligned=False, n=41, dx=0.5, samples=8):
        self.A = np.array([[-4.0, 4.0], [-z, -1.0]])
        if aligned:
            self.A = np.diag(np.sort(np.linalg.eigvals(self.A).real)[::-1])
        self.n, self.dx = n, dx
        c = (np.arange(n) - n // 2) * dx + offset
        self.X, self.Y = np.meshgrid(c, c, indexing="ij")
        self.q = ((np.arange(samples) + 0.5) / samples - 0.5) * dx
        X, Y, q = self.X, self.Y, self.q
        self.u_centre = self.vel(X + dx / 2, Y)[0]
        self.v_centre = self.vel(X, Y + dx / 2)[1]
        self.u_face = np.stack([self.vel(X + dx / 2, Y + s)[0] for s in q])
        self.v_face = np.stack([self.vel(X + s, Y + dx / 2)[1] for s in q])
        self.u_back = self.vel(X[:1] - dx / 2, Y[:1])[0]
        self.v_back = self.vel(X[:, :1], Y[:, :1] - dx / 2)[1]

    def vel(self, x, y):
        a = self.A
        return a[0, 0] * x + a[0, 1] * y, a[1, 0] * x + a[1, 1] * y

    def rhs(self, p, scheme):
        """dp/dt of the densities p; nothing flows in from outside the grid."""
        dx, q = self.dx, self.q
        P = np.pad(p, ((0, 1), (0, 1)))
        right, up = P[1:, :-1], P[:-1, 1:]
        if scheme == "centre":
            fx = np.maximum(self.u_centre, 0) * p + np.minimum(self.u_centre, 0) * right
            fy = np.maximum(self.v_centre, 0) * p + np.minimum(self.v_centre, 0) * up
        elif scheme == "split":
            fx = np.maximum(self.u_face, 0).mean(0) * p + np.minimum(self.u_face, 0).mean(0) * right
            fy = np.maximum(self.v_face, 0).mean(0) * p + np.minimum(self.v_face, 0).mean(0) * up
        else:
            Q = np.pad(p, 1)
            sx = mc_slope(Q[1:-1, 1:-1] - Q[:-2, 1:-1], Q[2:, 1:-1] - Q[1:-1, 1:-1])
            sy = mc_slope(Q[1:-1, 1:-1] - Q[1:-1, :-2], Q[1:-1, 2:] - Q[1:-1, 1:-1])
            SX, SY = np.pad(sx, ((0, 1), (0, 1))), np.pad(sy, ((0, 1), (0, 1)))
            t = (1.0 if scheme == "muscl-t" else 0.0) * (q[:, None, None] / dx)
            lo = p + 0.5 * sx + t * sy
            hi = right - 0.5 * SX[1:, :-1] + t * SY[1:, :-1]
            fx = (np.maximum(self.u_face, 0) * lo + np.minimum(self.u_face, 0) * hi).mean(0)
            lo = p + 0.5 * sy + t * sx
            hi = up - 0.5 * SY[:-1, 1:] + t * SX[:-1, 1:]
            fy = (np.maximum(self.v_face, 0) * lo + np.minimum(self.v_face, 0) * hi).mean(0)
        fx_back = np.concatenate([np.minimum(self.u_back, 0) * p[:1], fx[:-1]], 0)
        fy_back = np.concatenate([np.minimum(self.v_back, 0) * p[:, :1], fy[:, :-1]], 1)
        return -(fx - fx_back) / dx - (fy - fy_back) / dx

    def start(self, sd=0.6, dist=2.5):
        w, V = np.linalg.eig(self.A)
        vs = V[:, np.argmin(w)]
        mu = dist * vs / np.linalg.norm(vs) * np.sign(vs[1])
        cdf = np.vectorize(lambda a: 0.5 * (1 + erf(a / np.sqrt(2))))
        h = self.dx / 2
        ex = cdf((self.X + h - mu[0]) / sd) - cdf((self.X - h - mu[0]) / sd)
        ey = cdf((self.Y + h - mu[1]) / sd) - cdf((self.Y - h - mu[1]) / sd)
        return mu, ex * ey / self.dx ** 2

    def steps(self, scheme, times, sd=0.6):
        """The scheme's densities and the exact samples at each of the sorted times."""
        mu, p = self.start(sd)
        rng = np.random.default_rng(0)
        samples = mu + sd * rng.standard_normal((400000, 2))
        rate = np.abs(self.u_centre).max() / self.dx + np.abs(self.v_centre).max() / self.dx
        dt, t = 0.4 / rate, 0.0
        for target in times:
            while t < target - 1e-12:
                h = min(dt, target - t)
                if scheme.startswith("muscl"):
                    p1 = p + h * self.rhs(p, scheme)
                    p = 0.5 * p + 0.5 * (p1 + h * self.rhs(p1, scheme))
                else:
                    p = p + h * self.rhs(p, scheme)
                t += h
            yield target, p, samples @ expm(self.A * target).T

    def run(self, scheme, t_end=0.9, every=0.1, sd=0.6):
        """(t, scheme's probability near the axis, exact one) every `every`."""
        near = (np.abs(self.X) < 0.75) & (np.abs(self.Y) < 0.75)
        times = [k * every for k in range(int(round(t_end / every)) + 1)]
        rows = []
        for t, p, moved in self.steps(scheme, times, sd):
            exact = np.mean((np.abs(moved[:, 0]) < 0.75) & (np.abs(moved[:, 1]) < 0.75))
            rows.append((t, p[near].sum() * self.dx ** 2, exact))
        return rows

    def columns(self, scheme, t, sd=0.6):
        """At time t: the centres of the x columns, the scheme's probability
        in each and the exact one (the samples histogrammed the same way)."""
        _, p, moved = next(self.steps(scheme, [t], sd))
        c = self.X[:, 0]
        edges = np.append(c - self.dx / 2, c[-1] + self.dx / 2)
        exact = np.histogram(moved[:, 0], bins=edges)[0] / len(moved)
        return c, p.sum(1) * self.dx ** 2, exact


def main():
    args = sys.argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return
    z, offset, aligned, schemes, at = -25.0, 0.0, False, [], None
    while args:
        a = args.pop(0)
        if a in ("--z", "--offset", "--columns"):
            if not args:
                sys.exit(f"saddle.py: {a} needs a number")
            v = float(args.pop(0))
            if a == "--z":
                z = v
            elif a == "--offset":
                offset = v
            else:
                at = v
        elif a == "--aligned":
            aligned = True
        elif a in SCHEMES:
            schemes.append(a)
        else:
            sys.exit(f"saddle.py: unknown argument {a} (--help)")
    model = Saddle(z, offset, aligned)
    w = np.linalg.eigvals(model.A)
    turned = "turned onto the grid's axes" if aligned else "as Lorenz '63 has it"
    print(f"z = {z:g}, lattice offset {offset:g}: saddle rates {w.max():+.2f} and {w.min():+.2f}, {turned}")
    for scheme in schemes or SCHEMES:
        if at is not None:
            c, got, exact = model.columns(scheme, at)
            print(f"{scheme}: probability in each x column at t = {at:g} (scheme / exact, %)")
            print("  " + "  ".join(f"{x:+.2f}: {g * 100:.2f}/{e * 100:.2f}"
                                   for x, g, e in zip(c, got, exact) if abs(x) < 2.5))
            continue
        rows = model.run(scheme)
        print(f"{scheme}: t, probability within |x|, |y| < 0.75 (scheme, exact), decay rates")
        for (t0, g0, e0), (t1, g1, e1) in zip(rows, rows[1:]):
            print(f"  {t1:4.1f}  {g1:.3e}  {e1:.3e}   {np.log(g0 / g1) / (t1 - t0):6.2f}  {np.log(e0 / e1) / (t1 - t0):6.2f}")


if __name__ == "__main__":
    main()
