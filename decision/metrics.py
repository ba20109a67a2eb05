"""Evaluation statistics for question groups: pure functions used by `decision eval` and the
batch scorer.

Inputs are ``Record`` s: one per answered question, with its group, whether it was right, its
question type and the decoding mode (``"joint"`` or ``"standalone"``). Definitions:

- **Per-question accuracy** with a cluster-robust standard error by group (questions of one group
  share a document, so their errors are correlated). With ``y_i`` in {0, 1}, ``N`` questions,
  ``G`` groups and ``p = sum y_i / N``, the cluster-robust sandwich variance of a mean
  (Liang & Zeger 1986; Cameron & Miller 2015, "A Practitioner's Guide to Cluster-Robust
  Inference") with the usual G/(G-1) small-sample factor is
  ``V = G / (G - 1) * sum_g (sum_{i in g} (y_i - p))^2 / N^2``. The interval is the Wilson
  interval (below) on the effective sample size ``n_eff = p(1-p) / V`` capped at ``N`` (``N``
  when ``V = 0``, as when every answer is right or every one wrong), so it never has zero width
  and stays inside [0, 1]; away from 0 and 1 it is close to ``p +- 1.96 sqrt(V)`` (the interval
  used until 2026-12-07). With one group the standard error is undefined (NaN). With fewer than
  30 groups (``few_groups``) the interval is optimistic: the sandwich variance is then biased
  low and the normal quantile too small; the Markdown summary says so.
- **Groups fully correct**: the share of groups whose every question is right, with the Wilson
  score interval (Wilson 1927): ``(p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)``.
- **Independence baseline** ``E[p^k]``: the share of groups one would expect fully correct if
  each question were right independently with the accuracy of its question type. With ``a_t``
  the accuracy of type ``t`` over all records of the mode, it is
  ``(1/G) sum_g prod_{i in g} a_{t(i)}``; with a single type and groups of size k this is
  ``E[p^k]``. Groups fully correct above this baseline means the errors are positively correlated
  within groups (or, with joint decoding, that answers help each other).
- **Paired joint-minus-standalone difference**: on the same questions, the difference in
  per-question accuracy (sum of per-question differences / N) and in groups fully correct, with a
  percentile bootstrap 95% interval that resamples whole groups with replacement (seeded), and
  the discordant counts (questions, or groups fully correct, right in only one mode). Where
  fewer than 10 groups hold a discordant question (fewer than 10 groups are discordant) the
  bootstrap, which draws groups, sees too few differences (with none its interval is [0, 0]),
  and the interval is instead the paired-hits one below on the questions (groups).
- **Paired hits** (two players on the same items, e.g. Xiangqi positions): B's hit rate minus
  A's, with the normal (Wald) interval for paired proportions built on the discordant items
  ``se = sqrt(b + c - (b - c)^2 / n) / n``; with fewer than 20 discordant items, or where that
  interval would have zero width or leave [-1, 1] (B - A near +-1: every item, or all but a few,
  discordant one way), Newcombe's method 10 (Newcombe 1998, "Improved confidence intervals for
  the difference between binomial proportions based on paired data", Stat. Med. 17: 2635-2650):
  the two Wilson intervals combined with the continuity-corrected phi correlation of the pairs,
  never of zero width.
- **Majority baseline** per question type: the share of its questions whose gold equals the most
  frequent gold of that type (needs ``gold`` on the records).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from decision.errors import DecisionInputError

Z95 = 1.959963984540054  # the 97.5% quantile of the standard normal


@dataclass(frozen=True)
class Record:
    """One answered question. ``gold`` is optional (only the majority baseline needs it);
    ``answer`` is what the model said, kept for error analysis."""

    group_id: str
    question_id: str
    correct: bool
    qtype: str = ""
    mode: str = "joint"
    gold: Any = None
    answer: Any = None


FEW_GROUPS = 30  # below this many groups the cluster-robust interval is optimistic
SPARSE_BOOTSTRAP = 10  # fewer groups with a differing question / discordant groups: Newcombe
SPARSE_PAIRS = 20  # fewer discordant items: paired_hits_difference uses Newcombe's method 10


@dataclass(frozen=True)
class Estimate:
    """A proportion with its 95% interval; ``se`` (the cluster-robust standard error),
    ``n_eff`` (the effective sample size of its Wilson interval) and ``few_groups`` (fewer than
    ``FEW_GROUPS`` groups: the interval is optimistic) for per-question accuracy."""

    value: float
    low: float
    high: float
    n: int
    se: float | None = None
    n_eff: float | None = None
    few_groups: bool = False


@dataclass(frozen=True)
class TypeStat:
    """Accuracy of one question type, its count, and its majority baseline (None: no gold)."""

    accuracy: float
    n: int
    majority: float | None


@dataclass(frozen=True)
class PairedDifference:
    """Joint minus standalone on the same questions, with 95% intervals (bootstrap over groups,
    or ``"newcombe"`` where too few groups hold a difference for the bootstrap to draw from:
    ``question_method`` / ``group_method``). ``question_discordant`` = (questions right only
    joint, only standalone); ``group_discordant`` = (groups fully correct only joint, only
    standalone)."""

    question: Estimate
    group: Estimate
    n_groups: int
    n_boot: int
    question_discordant: tuple[int, int] = (0, 0)
    group_discordant: tuple[int, int] = (0, 0)
    question_method: str = "bootstrap"
    group_method: str = "bootstrap"


def _check(records: Sequence[Record]) -> None:
    if not records:
        raise DecisionInputError("no records to evaluate", "records")
    seen: set[tuple[str, str, str]] = set()
    for r in records:
        key = (r.mode, r.group_id, r.question_id)
        if key in seen:
            raise DecisionInputError(f"question {r.question_id!r} of group {r.group_id!r} appears "
                                     f"twice in mode {r.mode!r}", "records")
        seen.add(key)


def _by_group(records: Iterable[Record]) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        groups[r.group_id].append(r)
    return dict(groups)


def _wilson(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson interval of a proportion ``p`` on a (possibly effective, non-integer) ``n``."""
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if p <= 0.0 else max(0.0, centre - half)  # exact at the ends, where
    high = 1.0 if p >= 1.0 else min(1.0, centre + half)  # rounding would miss 0 or 1
    return low, high


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n`` (see the module docstring)."""
    if n <= 0 or not 0 <= successes <= n:
        raise DecisionInputError(f"need 0 <= successes <= n and n > 0, got {successes}/{n}", "n")
    return _wilson(successes / n, n, z)


def per_question_accuracy(records: Sequence[Record], z: float = Z95) -> Estimate:
    """Share of questions answered right, with the cluster-robust (by group) standard error and
    the Wilson interval on the effective sample size ``p(1-p)/se^2`` (at most N; N when se = 0)."""
    _check(records)
    n = len(records)
    p = sum(r.correct for r in records) / n
    groups = _by_group(records)
    g = len(groups)
    if g < 2:
        return Estimate(p, math.nan, math.nan, n, math.nan, few_groups=True)
    resid = sum(sum(r.correct - p for r in rows) ** 2 for rows in groups.values())
    se = math.sqrt(g / (g - 1) * resid / (n * n))
    # se = 0 when every answer is right (or wrong), or every group has the mean: n_eff = N
    n_eff = float(n) if se <= 0.0 else min(float(n), p * (1 - p) / (se * se))
    low, high = _wilson(p, n_eff, z)
    return Estimate(p, low, high, n, se, n_eff, g < FEW_GROUPS)


def group_accuracy(records: Sequence[Record], z: float = Z95) -> Estimate:
    """Share of groups with every question right, with the Wilson interval."""
    _check(records)
    groups = _by_group(records)
    full = sum(all(r.correct for r in rows) for rows in groups.values())
    low, high = wilson_interval(full, len(groups), z)
    return Estimate(full / len(groups), low, high, len(groups))


def accuracy_by_qtype(records: Sequence[Record]) -> dict[str, TypeStat]:
    """Accuracy, count and majority baseline of each question type, sorted by type name."""
    _check(records)
    by_type: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_type[r.qtype].append(r)
    out: dict[str, TypeStat] = {}
    for qtype in sorted(by_type):
        rows = by_type[qtype]
        majority = None
        if all(r.gold is not None for r in rows):
            counts = Counter(repr(r.gold) for r in rows)  # repr: True and 1 stay apart
            majority = counts.most_common(1)[0][1] / len(rows)
        out[qtype] = TypeStat(sum(r.correct for r in rows) / len(rows), len(rows), majority)
    return out


def majority_baseline(records: Sequence[Record]) -> float | None:
    """Per-question accuracy of always answering each type's most frequent gold (None: no gold)."""
    stats = accuracy_by_qtype(records)
    if any(s.majority is None for s in stats.values()):
        return None
    return sum(s.majority * s.n for s in stats.values()) / len(records)  # type: ignore[operator]


def independence_baseline(records: Sequence[Record]) -> float:
    """``(1/G) sum_g prod_{i in g} a_{t(i)}``: groups fully correct if errors were independent."""
    stats = accuracy_by_qtype(records)
    groups = _by_group(records)
    total = sum(math.prod(stats[r.qtype].accuracy for r in rows) for rows in groups.values())
    return total / len(groups)


def paired_difference(joint: Sequence[Record], standalone: Sequence[Record], n_boot: int = 2000,
                      seed: int = 0, level: float = 0.95) -> PairedDifference:
    """Joint minus standalone on the same (group, question) pairs; bootstrap over groups."""
    _check(joint)
    _check(standalone)
    if n_boot < 1:
        raise DecisionInputError("n_boot must be at least 1", "n_boot")
    j = {(r.group_id, r.question_id): r.correct for r in joint}
    s = {(r.group_id, r.question_id): r.correct for r in standalone}
    if j.keys() != s.keys():
        missing = sorted(j.keys() ^ s.keys())[:3]
        raise DecisionInputError(f"joint and standalone records cover different questions, "
                                 f"e.g. {missing}", "records")
    ids = sorted({g for g, _ in j})
    index = {g: i for i, g in enumerate(ids)}
    n_q = np.zeros(len(ids))
    diff_q = np.zeros(len(ids))  # per group: joint correct - standalone correct
    all_j = np.ones(len(ids))
    all_s = np.ones(len(ids))
    for (g, q), cj in j.items():
        i = index[g]
        n_q[i] += 1
        diff_q[i] += float(cj) - float(s[(g, q)])
        all_j[i] *= float(cj)
        all_s[i] *= float(s[(g, q)])
    diff_g = all_j - all_s
    q_counts = (sum(1 for k, cj in j.items() if cj and not s[k]),
                sum(1 for k, cj in j.items() if s[k] and not cj))
    # the bootstrap resamples groups: what it has to draw from is the groups holding a
    # difference, however many questions differ inside them (12 in 4 groups are 4 draws)
    q_groups = len({g for (g, q), cj in j.items() if bool(cj) != bool(s[(g, q)])})
    g_counts = (int((diff_g > 0).sum()), int((diff_g < 0).sum()))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(ids), size=(n_boot, len(ids)))
    boot_q = diff_q[draws].sum(axis=1) / n_q[draws].sum(axis=1)
    boot_g = diff_g[draws].mean(axis=1)
    tail = (1.0 - level) / 2 * 100
    q_low, q_high = np.percentile(boot_q, [tail, 100 - tail])
    g_low, g_high = np.percentile(boot_g, [tail, 100 - tail])
    z = NormalDist().inv_cdf(1.0 - (1.0 - level) / 2)
    q_method = g_method = "bootstrap"
    if q_groups < SPARSE_BOOTSTRAP:  # too few groups with a difference for the bootstrap
        keys = sorted(j)
        q_low, q_high = _newcombe10([s[k] for k in keys], [j[k] for k in keys], z)
        q_method = "newcombe"
    if sum(g_counts) < SPARSE_BOOTSTRAP:
        g_low, g_high = _newcombe10(list(all_s > 0), list(all_j > 0), z)
        g_method = "newcombe"
    question = Estimate(float(diff_q.sum() / n_q.sum()), float(q_low), float(q_high),
                        int(n_q.sum()))
    group = Estimate(float(diff_g.mean()), float(g_low), float(g_high), len(ids))
    return PairedDifference(question, group, len(ids), n_boot, q_counts, g_counts, q_method,
                            g_method)


@dataclass(frozen=True)
class PairedHits:
    """B minus A on the same items: ``b_only`` / ``a_only`` are the items only one got right."""

    n: int
    a_rate: float
    b_rate: float
    difference: float
    low: float
    high: float
    b_only: int
    a_only: int


def _newcombe10(a: Sequence[bool], b: Sequence[bool], z: float = Z95) -> tuple[float, float]:
    """Newcombe's (1998) method 10 for B's rate minus A's on paired items: the Wilson intervals
    of the two rates combined with the continuity-corrected phi of the 2x2 table."""
    n = len(a)
    table = Counter((bool(x), bool(y)) for x, y in zip(a, b, strict=True))  # one pass
    both, a_only = table[True, True], table[True, False]
    b_only, neither = table[False, True], table[False, False]
    p_b, p_a = (both + b_only) / n, (both + a_only) / n
    l_b, u_b = wilson_interval(both + b_only, n, z)
    l_a, u_a = wilson_interval(both + a_only, n, z)
    denom = (both + a_only) * (neither + b_only) * (both + b_only) * (neither + a_only)
    num = both * neither - a_only * b_only
    corrected = num - n / 2 if num > n / 2 else 0.0 if num >= 0 else num
    phi = 0.0 if denom == 0 else corrected / math.sqrt(denom)
    d = p_b - p_a
    low = d - math.sqrt(max(0.0, (p_b - l_b) ** 2 - 2 * phi * (p_b - l_b) * (u_a - p_a)
                            + (u_a - p_a) ** 2))
    high = d + math.sqrt(max(0.0, (u_b - p_b) ** 2 - 2 * phi * (u_b - p_b) * (p_a - l_a)
                             + (p_a - l_a) ** 2))
    return max(-1.0, low), min(1.0, high)


def paired_hits_difference(a: Sequence[bool], b: Sequence[bool], z: float = Z95) -> PairedHits:
    """B's hit rate minus A's on the same items, with the normal interval for paired proportions
    (only discordant items carry information): se = sqrt(b + c - (b - c)^2 / n) / n, with b and c
    the items only B and only A got right; with fewer than ``SPARSE_PAIRS`` discordant items
    (where that interval undercovers and, with none, has zero width), or where it would have zero
    width or leave [-1, 1] (every item, or nearly every one, discordant the same way), Newcombe's
    method 10. Empty input reports zero rates and a NaN interval."""
    if len(a) != len(b):
        raise DecisionInputError(f"paired hits need the same items, got {len(a)} and {len(b)}",
                                 "hits")
    n = len(a)
    if n == 0:
        return PairedHits(0, 0.0, 0.0, 0.0, math.nan, math.nan, 0, 0)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    diff = (b_only - a_only) / n
    se = math.sqrt(max(0.0, b_only + a_only - (b_only - a_only) ** 2 / n)) / n
    low, high = diff - z * se, diff + z * se
    if b_only + a_only < SPARSE_PAIRS or not -1.0 <= low < high <= 1.0:
        low, high = _newcombe10(a, b, z)
    return PairedHits(n, sum(map(bool, a)) / n, sum(map(bool, b)) / n, diff,
                      low, high, b_only, a_only)


def strict_json(value: Any) -> Any:
    """``value`` with NaN/inf (an undefined standard error, as with one group) as null, so that
    ``json.dumps(..., allow_nan=False)`` writes strict JSON that every reader takes."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def _pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:.1f}%"


def _ci(e: Estimate) -> str:
    return f"{_pct(e.value)} [{_pct(e.low)}, {_pct(e.high)}]"


def _signed(e: Estimate) -> str:
    return (f"{100 * e.value:+.1f} pts [{100 * e.low:+.1f}, {100 * e.high:+.1f}]")


def summarize(records: Sequence[Record], n_boot: int = 2000, seed: int = 0
              ) -> tuple[dict[str, Any], str]:
    """All statistics per mode (and joint vs standalone when both are present).

    Returns a JSON-ready dict and a Markdown report (an overview table per mode, a table of
    accuracy per question type, and the paired difference).
    """
    _check(records)
    by_mode: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_mode[r.mode].append(r)
    modes = sorted(by_mode, key=lambda m: (m != "joint", m != "standalone", m))
    result: dict[str, Any] = {"modes": {}}
    for mode in modes:
        rows = by_mode[mode]
        result["modes"][mode] = {
            "per_question": asdict(per_question_accuracy(rows)),
            "groups_fully_correct": asdict(group_accuracy(rows)),
            "independence_baseline": independence_baseline(rows),
            "majority_baseline": majority_baseline(rows),
            "by_qtype": {t: asdict(s) for t, s in accuracy_by_qtype(rows).items()},
        }
    if "joint" in by_mode and "standalone" in by_mode:
        diff = paired_difference(by_mode["joint"], by_mode["standalone"], n_boot, seed)
        result["joint_minus_standalone"] = asdict(diff)

    lines = ["| mode | questions | per-question accuracy (95% CI) | majority baseline | groups | "
             "groups fully correct (Wilson 95%) | independence baseline E[p^k] |",
             "|---|---:|---|---:|---:|---|---:|"]
    for mode in modes:
        m = result["modes"][mode]
        pq, ga = Estimate(**m["per_question"]), Estimate(**m["groups_fully_correct"])
        lines.append(f"| {mode} | {pq.n} | {_ci(pq)} | {_pct(m['majority_baseline'])} | "
                     f"{ga.n} | {_ci(ga)} | {_pct(m['independence_baseline'])} |")
    qtypes = sorted({r.qtype for r in records})
    lines += ["", "| question type | " + " | ".join(f"{m} accuracy" for m in modes)
              + " | n | majority baseline |",
              "|---|" + "---:|" * (len(modes) + 2)]
    for qtype in qtypes:
        cells, n, majority = [], 0, None
        for mode in modes:
            stat = result["modes"][mode]["by_qtype"].get(qtype)
            cells.append(_pct(stat["accuracy"]) if stat else "-")
            if stat:
                n = max(n, stat["n"])
                majority = stat["majority"] if majority is None else majority
        lines.append(f"| {qtype or '(none)'} | " + " | ".join(cells)
                     + f" | {n} | {_pct(majority)} |")
    few = [(mode, result["modes"][mode]["per_question"]) for mode in modes
           if result["modes"][mode]["per_question"].get("few_groups")]
    if few:
        groups = len(_by_group(by_mode[few[0][0]]))
        if groups < 2:  # no interval at all (shown as -), not a narrow one
            lines += ["", "Note: the predictions rest on one group: no per-question interval "
                      "(the cluster-robust variance needs two groups or more)."]
        else:
            lines += ["", f"Note: per-question intervals rest on {groups} groups (fewer than "
                      f"{FEW_GROUPS}): the cluster-robust interval is optimistic (too narrow)."]
    if "joint_minus_standalone" in result:
        d = result["joint_minus_standalone"]
        q, g = Estimate(**d["question"]), Estimate(**d["group"])
        qj, qs = d["question_discordant"]
        gj, gs = d["group_discordant"]
        how = {"bootstrap": "bootstrap over groups", "newcombe": "Newcombe, few discordant"}
        lines += ["", f"Joint minus standalone on the same {q.n} questions / {g.n} groups "
                  f"(95%; bootstrap over groups, {d['n_boot']} draws, where at least "
                  f"{SPARSE_BOOTSTRAP} groups hold a difference): per question {_signed(q)} "
                  f"({how[d['question_method']]}; right only joint {qj}, only standalone {qs}); "
                  f"groups fully correct {_signed(g)} ({how[d['group_method']]}; only joint {gj}, "
                  f"only standalone {gs})."]
    return result, "\n".join(lines)
