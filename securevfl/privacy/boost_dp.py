"""The privacy of ``secureboost --epsilon``: Gaussian noise on the encrypted bin sums a data party
returns, so the label holder decrypts only noisy per-bin gradient sums of the partner's columns.

Unit: ``party-row`` -- one row of data party k's block (its columns) changes; the label holder's
gradients, hessians and labels and the other parties' blocks stay. The adversary is the label
holder (it holds the key and decrypts the sums).

Sensitivity of one release. At one tree level party k returns, for every node of the level,
every column c it uses (``columns``) and every bin b, the pair (sum g, sum h) over the node's rows
whose column c falls in bin b. Each row lies in at most one node of a level. Changing the row's
columns moves it, in every column, from one bin to another (same node: the node is fixed by the
rows' earlier partition, see below): in each column two bins change by (g, h). With g clipped to
[-C_g, C_g] and h to [0, C_h], divide every g slot by C_g and every h slot by C_h; a moved row
then changes one column's vector by at most sqrt(2 ((g/C_g)^2 + (h/C_h)^2)) <= 2 in L2, and all
``columns`` of it by at most ``2 sqrt(columns)`` (:func:`level_sensitivity`). The party adds
N(0, (sigma C_g)^2) to each g slot and N(0, (sigma C_h)^2) to each h slot: in the normalised units
a Gaussian mechanism with per-coordinate noise sigma and sensitivity 2 sqrt(columns).

Composition. A run releases one such vector per tree and level where partners are asked
(``releases`` = partner trees x depth), composed adaptively by the accountant (PLD). The
noise is drawn under encryption from the data party's CSPRNG, so the label holder cannot remove
it; the integer rounding of the fixed-point noise is post-processing (sums are integers).

Outside the guarantee (named in the record): each node's partition of the rows at a split the
label holder picks on a partner's column is returned exactly (the instance space), so the rows'
sides of a partner threshold are learnt without noise; the analysis above holds conditional on
those partitions. No subsampling amplification is claimed: the label holder draws the row
sample itself.
"""

from __future__ import annotations

import math

SIGMA_RANGE = (1e-3, 1e5)  # the noise multipliers calibration searches


def level_sensitivity(columns: int) -> float:
    """L2 sensitivity of one level's normalised (g/C_g, h/C_h) bin sums of ``columns`` columns."""
    return 2.0 * math.sqrt(max(int(columns), 0))


def histogram_event(sigma: float, columns: int, releases: int):
    """The event of ``releases`` levels of one party's noisy bin sums."""
    from securevfl.privacy.events import gaussian_event  # dp_accounting: ~1 s, only when used

    return gaussian_event(sigma=sigma, sensitivity=level_sensitivity(columns), count=releases)


def epsilon_of(sigma: float, columns: int, releases: int, delta: float) -> float:
    """ε(δ) of ``releases`` noisy levels, from the accountant."""
    from securevfl.privacy.accountant import Accountant

    if releases == 0 or columns == 0:
        return 0.0
    return Accountant().compose(histogram_event(sigma, columns, releases)).get_epsilon(delta)


def calibrate_sigma(
    epsilon: float, columns: int, releases: int, delta: float
) -> tuple[float, float]:
    """The smallest noise (sigma, its ε) whose ε over the run is at most ``epsilon``."""
    from securevfl.privacy.accountant import calibrate

    lo, hi = SIGMA_RANGE
    return calibrate(
        lambda s: epsilon_of(s, columns, releases, delta),
        float(epsilon),
        lo=lo,
        hi=hi,
        what="sigma",
    )


OUTSIDE_GUARANTEE = (
    "the row partition (instance space) at every split on a partner's column is returned to the "
    "label holder exactly: which rows fall on each side of the chosen (public) bin edge",
    "every data party learns the instance space of every node it is asked to sum for (the "
    "label holder's own splits included): not a release of the partner's rows, not covered",
    "the label holder's labels, gradients and own columns are not protected by this ε (the "
    "unit protects a partner's columns against the label holder)",
    "test scoring routes each test row through the owners' lookup tables: the owners learn "
    "the test rows' instance spaces, the label holder their paths",
)
