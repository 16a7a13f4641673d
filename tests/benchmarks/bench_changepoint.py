"""Change point benchmark: accuracy, speed and real-data F1 of jobs.detect.changepoint next to its peers.

One run, one generated data set (fixed seed, hash checked): 1,000 labeled series (n = 60/240/1000, half
with a +10..100% step, lognormal noise, spikes in a third). Peers (MongoDB's signal-processing-algorithms
e_divisive and apache-otava) run in their own virtualenvs under .bench/venvs on a bounded subset (first
PEER_SUBSET series of each length) because they take milliseconds to seconds per series; our detector is
scored on that same subset (the comparison) and on all 1,000. Then: throughput on 100,000 series of
n = 240, one series of n = 20,000, the O(n log n) energy statistic against a chunked O(n^2) broadcast,
and F1 on the real TCPD series. Set CP_BENCH_QUICK=1 for a small smoke run.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from jobs.detect.changepoint import (
    benjamini_hochberg,
    change_point_arrays,
    most_significant_change_points,
    segment_change_points,
)
from jobs.detect.config import ChangePointConfig
from jobs.detect.energy import energy_statistics
from tests.benchmarks.cp_data import (
    LENGTHS,
    MULTI_STEP_PATTERNS,
    generate_labeled,
    generate_multi_step,
    load_tcpd,
    margin_for,
    score_single,
    score_steps,
    tcpd_f1,
    values_hash,
)
from tests.benchmarks.cp_peers import PEERS, run_peer

QUICK = os.environ.get("CP_BENCH_QUICK") == "1"
RESULTS = Path(__file__).resolve().parents[2] / ".bench" / "results" / "changepoint.json"
DATA_SEED = 20261129
# SHA-256 of the 1,000 generated series (stdlib RNG): a changed generator or Python must not go unnoticed.
EXPECTED_HASH = "5e8f7daf8e0b441ba2eb40843f6b64a191e24224f1f9658d0ba8cafca95108f7"
PEER_SUBSET = 20 if QUICK else 200
THROUGHPUT_SERIES = 5_000 if QUICK else 100_000
LONG_SERIES = 20_000
P_LEVELS = (0.001, 0.01, 0.05)
FDR_Q = 0.01


def _quadratic_energy(stack: np.ndarray, min_segment: int, chunk_elements: int = 1 << 22) -> np.ndarray:
    """Q(tau) by a chunked O(n^2) numpy broadcast: the straightforward batched alternative we measured."""
    batch, n = stack.shape
    out = np.empty((batch, n - 2 * min_segment + 1))
    rows_per_chunk = max(1, chunk_elements // (n * n))
    lower = np.tril(np.ones((n, n), dtype=bool), -1)
    m = np.arange(min_segment, n - min_segment + 1, dtype=np.float64)
    k = n - m
    for start in range(0, batch, rows_per_chunk):
        x = stack[start : start + rows_per_chunk]
        distance = np.abs(x[:, :, None] - x[:, None, :])
        all_sums = distance.sum(axis=2)
        before = (distance * lower).sum(axis=2)
        after = all_sums - before
        within_prefix = np.concatenate([np.zeros((len(x), 1)), np.cumsum(before, axis=1)], axis=1)
        after_prefix = np.concatenate([np.zeros((len(x), 1)), np.cumsum(after, axis=1)], axis=1)
        taus = np.arange(min_segment, n - min_segment + 1)
        left = within_prefix[:, taus]
        right = after_prefix[:, -1:] - after_prefix[:, taus]
        cross = within_prefix[:, -1:] - left - right
        out[start : start + len(x)] = (
            (2.0 / n) * cross - (2.0 * k / (n * (m - 1))) * left - (2.0 * m / (n * (k - 1))) * right
        )
    return out


def _timed(call: Callable[[], object]) -> tuple[object, float]:
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def _row(name: str, scores: dict[str, float], seconds_per_series: float | None) -> str:
    timing = f"{seconds_per_series * 1e3:10.3f}" if seconds_per_series is not None else f"{'-':>10}"
    return (
        f"{name:44s} {scores['precision']:9.3f} {scores['recall']:7.3f} {scores['false_positive_rate']:6.3f} "
        f"{scores['f1']:6.3f} {int(scores['detections']):5d} {timing}"
    )


def _header() -> str:
    columns = ("precision", 9), ("recall", 7), ("FPR", 6), ("F1", 6), ("flags", 5), ("ms/series", 10)
    return f"{'detector':44s} " + " ".join(f"{name:>{width}s}" for name, width in columns)


def large_step_false_alarms(labeled: list, config: object = None) -> dict[str, object]:
    """The fast confirmation of large steps (jobs.detect.large_steps, the unannounced analysis' defaults)
    at *every* look, as a per-minute detection sees a series grow: each prefix of each unchanged series,
    and each prefix of a changed one that ends before its change (its steps are +10-100%: none is large).
    A series counts once if any look fires. Today's false-positive rate (the segmentation, one look at the
    whole series) is the reference; what the fast path adds is this share."""
    from jobs.detect.config import RegressionConfig
    from jobs.detect.large_steps import large_steps_at_end

    config = config or RegressionConfig()
    window = config.large_step_reference_samples + config.large_step_max_new_samples
    windows: list[np.ndarray] = []
    owners: list[int] = []
    for number, item in enumerate(labeled):
        end = len(item.values) if item.change is None else item.change
        for stop in range(config.large_step_min_reference + 2, end + 1):
            windows.append(item.values[max(0, stop - window) : stop])
            owners.append(number)
    started = time.perf_counter()
    sizes = np.array([w.size for w in windows], dtype=np.int64)
    found = large_steps_at_end(np.concatenate(windows), sizes, config)
    seconds = time.perf_counter() - started
    fired = sorted({owners[int(g)] for g in found.group})
    looked = sorted(set(owners))
    negatives = [i for i in looked if labeled[i].change is None]
    out = {
        "looks": len(windows),
        "series_looked_at": len(looked),
        "series_fired": len(fired),
        "unchanged_series": len(negatives),
        "unchanged_series_fired": sum(1 for i in fired if labeled[i].change is None),
        "fired_with_outliers": sum(1 for i in fired if labeled[i].has_outliers),
        "seconds": round(seconds, 3),
    }
    print(
        f"\nlarge-step fast path at every look: {out['looks']:,} looks on {len(looked)} series "
        f"({len(negatives)} unchanged): fired on {len(fired)} ({out['unchanged_series_fired']} unchanged), "
        f"{seconds:.2f} s"
    )
    return out


def main() -> None:
    report: dict[str, object] = {"machine": platform.platform(), "cpus": os.cpu_count(), "quick": QUICK}
    count = 120 if QUICK else 1000
    labeled = generate_labeled(count, DATA_SEED)
    series = [item.values for item in labeled]
    truth = [item.change for item in labeled]
    lengths = [len(s) for s in series]
    digest = values_hash(series)
    if not QUICK and digest != EXPECTED_HASH:
        raise RuntimeError(f"generated data changed: sha256 {digest} != {EXPECTED_HASH}")
    report["data"] = {"series": count, "seed": DATA_SEED, "sha256": digest, "lengths": list(LENGTHS)}
    print(f"data: {count} series, n in {LENGTHS}, seed {DATA_SEED}, sha256 {digest[:16]}...")
    print(f"a located change is correct within max(5, 5% of n) points: {[margin_for(n) for n in LENGTHS]}")

    # ---- our detector on all series, both tests, several significance levels --------------------------
    accuracy: dict[str, dict[str, object]] = {}
    ours_points: dict[str, list[tuple[int | None, float]]] = {}
    for test in ("rank", "permutation"):
        config = ChangePointConfig(test=test, max_p_value=1.0)
        seconds_by_length: dict[int, float] = {}
        points_all: list[tuple[int | None, float]] = [(None, 1.0)] * count
        for n in LENGTHS:
            members = [i for i, s in enumerate(series) if len(s) == n]
            points, seconds = _timed(
                lambda m=members, c=config: most_significant_change_points([series[i] for i in m], c)
            )
            seconds_by_length[n] = seconds / len(members)
            for i, point in zip(members, points, strict=True):  # type: ignore[arg-type]
                points_all[i] = (point.index, point.p_value)
        ours_points[test] = points_all
        for level in P_LEVELS:
            predicted = [[idx] if idx is not None and p <= level else [] for idx, p in points_all]
            accuracy[f"ours {test} p<={level}"] = {
                **asdict(score_single(truth, lengths, predicted)),
                "ms_per_series": {n: s * 1e3 for n, s in seconds_by_length.items()},
            }
    rank_p = np.array([p for _, p in ours_points["rank"]])
    discoveries = benjamini_hochberg(rank_p, FDR_Q)
    predicted = [
        [idx] if idx is not None and found else []
        for (idx, _), found in zip(ours_points["rank"], discoveries, strict=True)
    ]
    accuracy[f"ours rank, BH q={FDR_Q} across all series"] = {
        **asdict(score_single(truth, lengths, predicted)),
        "ms_per_series": accuracy["ours rank p<=0.01"]["ms_per_series"],
    }
    print(f"\nall {count} series, our detector (time per series averaged over lengths):")
    print(_header())
    for name, scores in accuracy.items():
        mean_ms = float(np.mean(list(scores["ms_per_series"].values()))) / 1e3  # type: ignore[union-attr]
        print(_row(name, scores, mean_ms))  # type: ignore[arg-type]
    report["ours_all"] = accuracy

    # ---- segmentation (every change point) on the labelled set: binary vs seeded ----------------------
    segmentation: dict[str, dict[str, object]] = {}
    multi = generate_multi_step(150 if QUICK else 600)
    multi_series = [item.values for item in multi]
    for mode in ("binary", "seeded"):  # warm-up: the exact rank tables are built once per (m, k)
        segment_change_points(series[:60] + multi_series[:60], ChangePointConfig(segmentation=mode))
    print(f"\nall {count} series, segment_change_points (a series is flagged when any point is found):")
    print(_header())
    seconds_of: dict[str, float] = {}
    for mode in ("binary", "seeded"):
        for label, config, fdr_q in (
            (f"{mode} segmentation, defaults", ChangePointConfig(segmentation=mode), None),
            (
                f"{mode} segmentation, no serial corr.",
                ChangePointConfig(segmentation=mode, serial_correction=False),
                None,
            ),
            (f"{mode} segmentation, BH q={FDR_Q}", ChangePointConfig(segmentation=mode), FDR_Q),
        ):
            found_all, took = _timed(lambda c=config, q=fdr_q: segment_change_points(series, c, fdr_q=q))
            seconds_of.setdefault(mode, took)
            predicted = [[p.index for p in points if p.index is not None] for points in found_all]  # type: ignore[union-attr]
            scores = asdict(score_single(truth, lengths, predicted))
            segmentation[label] = {**scores, "seconds": took}
            print(_row(label, scores, took / count))
    report["segmentation_labeled"] = segmentation
    report["large_steps"] = large_step_false_alarms(labeled)

    # ---- multi-step series: recall of every step, binary vs seeded, and their speed --------------------
    multi_truth = [item.changes for item in multi]
    multi_lengths = [len(item.values) for item in multi]
    multi_scores: dict[str, dict[str, object]] = {}
    print(
        f"\nmulti-step: {len(multi)} series (n 60/120/240; patterns {', '.join(MULTI_STEP_PATTERNS)}), "
        "a step found within max(5, 5% of n):"
    )
    print(f"{'segmentation':44s} {'step recall':>11s} {'precision':>9s} {'all found':>9s} {'s total':>8s}")
    multi_seconds: dict[str, float] = {}
    for mode in ("binary", "seeded", "seeded decay 0.5"):
        base = ChangePointConfig(segmentation="binary" if mode == "binary" else "seeded")
        if mode == "seeded decay 0.5":
            base = replace(base, seeded_decay=0.5)
        for label, config in (
            (f"{mode}, defaults", base),
            (
                f"{mode}, no serial corr. (deploy stage 1)",
                replace(base, serial_correction=False),
            ),
            (f"{mode}, clean steps widened too", replace(base, serial_exempt_clean_steps=False)),
        ):
            found_all, took = _timed(lambda c=config: segment_change_points(multi_series, c))
            multi_seconds.setdefault(mode, took)
            predicted = [[p.index for p in points if p.index is not None] for points in found_all]  # type: ignore[union-attr]
            overall = score_steps(multi_truth, multi_lengths, predicted)
            by_pattern = {
                pattern: score_steps(
                    [t for t, m in zip(multi_truth, multi, strict=True) if m.pattern == pattern],
                    [n for n, m in zip(multi_lengths, multi, strict=True) if m.pattern == pattern],
                    [p for p, m in zip(predicted, multi, strict=True) if m.pattern == pattern],
                )["step_recall"]
                for pattern in MULTI_STEP_PATTERNS
            }
            multi_scores[label] = {**overall, "step_recall_by_pattern": by_pattern, "seconds": took}
            print(
                f"{label:44s} {overall['step_recall']:11.3f} {overall['point_precision']:9.3f} "
                f"{overall['all_steps_found']:9.3f} {took:8.3f}"
            )
            print("    step recall by pattern: " + ", ".join(f"{k} {v:.3f}" for k, v in by_pattern.items()))
    ratio_labeled = seconds_of["seeded"] / seconds_of["binary"]
    ratio_multi = multi_seconds["seeded"] / multi_seconds["binary"]
    print(
        f"speed, same run: seeded / binary segmentation time = {ratio_labeled:.1f}x on the labelled set, "
        f"{ratio_multi:.1f}x on the multi-step set"
    )
    report["multi_step"] = {"scores": multi_scores, "seeded_over_binary_time": [ratio_labeled, ratio_multi]}

    # ---- subset comparison with the peers ------------------------------------------------------------
    subset = [i for n in LENGTHS for i in [j for j, s in enumerate(series) if len(s) == n][:PEER_SUBSET]]
    sub_truth = [truth[i] for i in subset]
    sub_lengths = [lengths[i] for i in subset]
    comparison: dict[str, dict[str, object]] = {}
    default = ChangePointConfig()
    for test in ("rank", "permutation"):
        level = default.max_p_value
        predicted = [
            [ours_points[test][i][0]]
            if ours_points[test][i][0] is not None and ours_points[test][i][1] <= level
            else []
            for i in subset
        ]
        scores = asdict(score_single(sub_truth, sub_lengths, predicted))
        per_length = accuracy[f"ours {test} p<={level}"]["ms_per_series"]
        comparison[f"ours {test} p<={level}"] = {**scores, "ms_per_series": per_length}
    peer_ms_240: dict[str, float] = {}
    for peer in PEERS:
        try:
            (found, seconds), wall = _timed(lambda p=peer: run_peer(p, [series[i] for i in subset]))
        except Exception as exc:  # a peer failing must not hide our numbers
            print(f"peer {peer.name} failed: {exc!r}")
            comparison[peer.label] = {"error": repr(exc)}
            continue
        scores = asdict(score_single(sub_truth, sub_lengths, found))  # type: ignore[arg-type]
        per_length = {
            n: 1e3 * float(np.mean([s for s, m in zip(seconds, sub_lengths, strict=True) if m == n]))
            for n in LENGTHS
        }
        peer_ms_240[peer.label] = per_length[240]
        comparison[peer.label] = {**scores, "ms_per_series": per_length, "wall_seconds": wall}
    print(
        f"\npeer comparison on the first {PEER_SUBSET} series of each length ({len(subset)} series); "
        "peers at their defaults (MongoDB p=0.05, 100 permutations; Otava window 50, p<=0.001);"
    )
    print(
        "a peer's series is flagged when it returns any change point, scored by its point nearest the truth"
    )
    print(_header() + "   ms at n=60 / 240 / 1000")
    for name, scores in comparison.items():
        if "error" in scores:
            print(f"{name:44s} FAILED")
            continue
        ms = scores["ms_per_series"]
        print(_row(name, scores, None) + "   " + " / ".join(f"{ms[n]:.3f}" for n in LENGTHS))  # type: ignore[arg-type,index]
    report["comparison_subset"] = comparison

    # ---- throughput -----------------------------------------------------------------------------------
    rng = np.random.default_rng(7)
    stack = rng.lognormal(0.0, 0.3, (THROUGHPUT_SERIES, 240))
    stack[THROUGHPUT_SERIES // 2 :, 120:] *= 1.5
    arrays, seconds_arrays = _timed(lambda: change_point_arrays(stack, default))
    listed, seconds_list = _timed(lambda: most_significant_change_points(list(stack), default))
    rate_arrays = THROUGHPUT_SERIES / seconds_arrays
    rate_list = THROUGHPUT_SERIES / seconds_list
    throughput = {
        "series": THROUGHPUT_SERIES,
        "n": 240,
        "array_api_series_per_second": rate_arrays,
        "list_api_series_per_second": rate_list,
        "flagged_fraction_first_half_no_change": float(arrays.significant[: THROUGHPUT_SERIES // 2].mean()),  # type: ignore[attr-defined]
        "flagged_fraction_second_half_step": float(arrays.significant[THROUGHPUT_SERIES // 2 :].mean()),  # type: ignore[attr-defined]
        "ratio_vs_peer_ms_at_240": {label: rate_arrays * ms / 1e3 for label, ms in peer_ms_240.items()},
    }
    del listed
    print(f"\nthroughput, {THROUGHPUT_SERIES} series of n=240 (rank test, one process):")
    print(f"  change_point_arrays:            {rate_arrays:10.0f} series/s")
    print(f"  most_significant_change_points: {rate_list:10.0f} series/s")
    for label, ratio in throughput["ratio_vs_peer_ms_at_240"].items():  # type: ignore[union-attr]
        print(f"  x {ratio:8.0f} the per-series rate of {label} (measured above, same run)")
    report["throughput"] = throughput

    # ---- energy statistic: O(n log n) wavelet form against a chunked O(n^2) broadcast ------------------
    kernels: dict[str, dict[str, float]] = {}
    print("\nenergy statistic kernel, series per second (same random stacks):")
    for n, batch in ((60, 20_000), (240, 10_000), (1000, 1_000)):
        if QUICK:
            batch //= 10
        x = rng.lognormal(0.0, 0.3, (batch, n))
        chunk = (1 << 17) // n
        fast_seconds = 0.0
        fast = np.empty((batch, n - 9))
        for start in range(0, batch, chunk):
            part, took = _timed(lambda s=start, x=x, c=chunk: energy_statistics(x[s : s + c], 5))
            fast[start : start + chunk] = part[:, 5 : n - 4]  # type: ignore[index]
            fast_seconds += took
        slow, slow_seconds = _timed(lambda x=x: _quadratic_energy(x, 5))
        assert np.allclose(fast, slow, rtol=1e-9, atol=1e-6)  # type: ignore[arg-type]
        kernels[str(n)] = {
            "wavelet_series_per_s": batch / fast_seconds,
            "quadratic_series_per_s": batch / slow_seconds,
        }
        print(
            f"  n={n:5d}: O(n log n) wavelet {batch / fast_seconds:10.0f}   O(n^2) broadcast "
            f"{batch / slow_seconds:10.0f}   ratio {slow_seconds / fast_seconds:5.1f}x"
        )
    report["energy_kernel"] = kernels

    # ---- one long series ------------------------------------------------------------------------------
    long_series = rng.lognormal(0.0, 0.3, LONG_SERIES)
    long_series[13_000:] *= 1.2
    (long_point,), long_seconds = _timed(lambda: most_significant_change_points([long_series], default))  # type: ignore[misc]
    (long_segments,), segment_seconds = _timed(lambda: segment_change_points([long_series], default))  # type: ignore[misc]
    report["long_series"] = {
        "n": LONG_SERIES,
        "seconds_single": long_seconds,
        "index": long_point.index,
        "true_index": 13_000,
        "seconds_segmentation": segment_seconds,
        "segments_found": [p.index for p in long_segments],
    }
    print(
        f"\none series of n={LONG_SERIES} (step at 13000): most significant point {long_point.index} in "
        f"{long_seconds:.3f} s; segmentation found {[p.index for p in long_segments]} "
        f"in {segment_seconds:.3f} s;"
        " peers not run (Otava's E-divisive runs out of memory, MongoDB's is O(n^2) per permutation)"
    )

    # ---- TCPD -----------------------------------------------------------------------------------------
    tcpd, skipped = load_tcpd()
    names = [item.name for item in tcpd]
    f1: dict[str, dict[str, float]] = {
        "no change (baseline)": {a.name: tcpd_f1(a.annotations, []) for a in tcpd}
    }
    tcpd_configs = {
        "ours segment (defaults)": (default, None),
        "ours segment min_segment=10": (ChangePointConfig(min_segment=10), None),
        "ours segment FDR q=0.01": (default, 0.01),
    }
    for label, (config, fdr_q) in tcpd_configs.items():
        found_segments, took = _timed(
            lambda c=config, q=fdr_q: segment_change_points([a.values for a in tcpd], c, fdr_q=q)
        )
        f1[label] = {
            a.name: tcpd_f1(a.annotations, [p.index for p in points if p.index is not None])
            for a, points in zip(tcpd, found_segments, strict=True)
        }  # type: ignore[arg-type]
    for peer in PEERS:
        try:
            found, _seconds = run_peer(peer, [a.values for a in tcpd])
        except Exception as exc:
            print(f"peer {peer.name} failed on TCPD: {exc!r}")
            continue
        f1[peer.label] = {
            a.name: tcpd_f1(a.annotations, points) for a, points in zip(tcpd, found, strict=True)
        }
    summary = {label: float(np.mean([scores[name] for name in names])) for label, scores in f1.items()}
    print(
        f"\nTCPD: {len(tcpd)} univariate series (skipped: {', '.join(skipped) or 'none'}), "
        "mean F1 over series, margin 5:"
    )
    for label, value in summary.items():
        print(f"  {label:44s} {value:.3f}")
    report["tcpd"] = {"mean_f1": summary, "per_series": f1, "skipped": skipped}

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
