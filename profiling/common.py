"""Shared pieces of the benchmarks: timing, tables, JSON output, documents to walk.

Every benchmark prints a table and writes JSON under profiling/results/ (``--out`` overrides).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence

REPO = Path(__file__).resolve().parent.parent
MASKBENCH = REPO.parent / "shared" / "maskbench" / "data"
RESULTS = REPO / "profiling" / "results"


def machine() -> Dict[str, object]:
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def print_table(rows: List[Dict[str, object]], columns: List[str]) -> None:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print(" | ".join(c.ljust(widths[c]) for c in columns))
    print("-|-".join("-" * widths[c] for c in columns))
    for row in rows:
        print(" | ".join(_fmt(row.get(c)).ljust(widths[c]) for c in columns))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return "" if value is None else str(value)


def write_json(name: str, payload: Dict[str, object], out: Path = None) -> Path:
    path = out or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def maskbench_files(folder: Path, count: int) -> List[Path]:
    """``count`` MaskBench files spread evenly over the folder's sorted list (its sources:
    BFCL, GitHub easy/medium/hard, Kubernetes, Snowplow, ...)."""
    files = sorted(folder.glob("*.json"))
    if len(files) < count:
        raise SystemExit(f"{folder} holds {len(files)} MaskBench files, {count} needed")
    return [files[i * len(files) // count] for i in range(count)]


def maskbench_documents(limit: int, root_types=(dict, list), directory: Path = MASKBENCH
                        ) -> List[str]:
    """The first valid instance (object or array at the top) of each MaskBench file, serialised
    as the benchmark does: json.dumps(data, ensure_ascii=False)."""
    docs = []
    directory = Path(directory)
    if not directory.is_dir():
        return docs
    for path in sorted(directory.glob("*.json")):
        case = json.loads(path.read_text())
        for test in case.get("tests", []):
            if test.get("valid") and isinstance(test.get("data"), root_types):
                docs.append(json.dumps(test["data"], ensure_ascii=False))
                break
        if len(docs) >= limit:
            break
    return docs


def import_xgrammar():
    """The xgrammar module, or None (the benchmark then measures gxg alone)."""
    try:
        import xgrammar
        return xgrammar
    except ImportError:
        print("xgrammar is not installed: gxg only")
        return None


REPEATS_PER_GRAPH = 20


def graph_time(body, replays: int = 7) -> float:
    """Seconds per call of ``body`` (CUDA work on the current stream): median over replays of a
    CUDA graph of REPEATS_PER_GRAPH calls, captured after one warm-up call on a side stream."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(REPEATS_PER_GRAPH):
            body()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / REPEATS_PER_GRAPH)
    return sorted(times)[len(times) // 2]
