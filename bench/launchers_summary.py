"""The headline figures of bench/launchers.sh's runs, by benchmark and
launcher, each as the range over its rounds (issue 45).
Usage: launchers_summary.py DIR   (DIR holds BENCH.LAUNCHER.ROUND.json)"""

import json
import sys
from collections import defaultdict
from pathlib import Path

MIB = 1 << 20


def allreduce_rows(result, size=64 * MIB):
    row = min(result["rows"], key=lambda r: abs(r["bytes"] - size))
    label = f"{row['bytes'] // MIB} MiB"
    figures = {f"reduce() out of place, {label} (ms)": row["crown_oop_s"] * 1e3,
               f"MPI_Allreduce out of place, {label} (ms)": row["mpi_oop_s"] * 1e3,
               f"crown / MPI out of place, {label} (x speed)": row["crown_oop_vs_mpi_oop"],
               f"reduce_() in place, {label} (ms)": row["crown_s"] * 1e3,
               f"MPI_Allreduce in place, {label} (ms)": row["mpi_s"] * 1e3,
               f"crown / MPI in place, {label} (x speed)": row["crown_vs_mpi"]}
    return figures


def step_rows(result):
    return {"reduce() out of place + inspect, 64 MiB (ms/step)": result["crown_oop_s"] * 1e3,
            "MPI_Allreduce out of place, 64 MiB (ms)": result["mpi_oop_s"] * 1e3,
            "crown / MPI out of place (x speed)": result["mpi_oop_s"] / result["crown_oop_s"],
            "reduce_() in place, 64 MiB (ms/step)": result["crown_inplace_s"] * 1e3,
            "MPI_Allreduce in place, 64 MiB (ms)": result["mpi_inplace_s"] * 1e3,
            "crown / MPI in place (x speed)": result["mpi_inplace_s"] / result["crown_inplace_s"],
            "page faults per step, most of a rank": max(result["faults_per_step"])}


def dispatch_rows(result):
    return {"small op to completion (us/op)": result["completion_us"],
            "small op at the controller (us/op)": result["controller_us"],
            "eager torch (us/op)": result["eager_us"]}


def train_rows(result):
    return {"crown training step (ms)": result["crown"]["step_s"] * 1e3,
            "DDP over gloo step (ms)": result["ddp_gloo"]["step_s"] * 1e3,
            "DDP / crown (x faster)": result["crown"]["ddp_over_crown"]}


def bulk_rows(result):
    return {"64 MiB round trip, crown (ms)": result["crown"]["median_ms"],
            "64 MiB round trip, MPI (ms)": result["mpi"]["median_ms"],
            "crown / MPI bandwidth (x)": result["crown_over_mpi_bandwidth"]}


def to_mesh_rows(result, size=64 * MIB):
    row = min(result["rows"], key=lambda r: abs(r["bytes"] - size))
    label = f"{row['bytes'] // MIB} MiB"
    return {f"tensor to the mesh, {label} (ms)": row["crown_s"] * 1e3,
            f"MPI anchor, {label} (ms)": row["mpi_s"] * 1e3,
            f"crown / MPI, {label} (x speed)": row["crown_vs_mpi"]}


FIGURES = {"tensor_step": step_rows, "tensor_allreduce": allreduce_rows,
           "tensor_dispatch": dispatch_rows, "tensor_train": train_rows, "python_bulk": bulk_rows,
           "tensor_to_mesh": to_mesh_rows}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    found = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for path in sorted(Path(sys.argv[1]).glob("*.*.*.json")):
        bench, launcher, _ = path.stem.split(".")
        figures = FIGURES.get(bench)
        if figures is None:
            continue
        for name, value in figures(json.loads(path.read_text())).items():
            found[bench][name][launcher].append(value)
    for bench, names in found.items():
        launchers = sorted({launcher for by in names.values() for launcher in by})
        print(f"\n{bench}: range over rounds, by launcher")
        print(f"  {'':46}" + "".join(f"{launcher:>18}" for launcher in launchers))
        for name, by in names.items():
            cells = []
            for launcher in launchers:
                values = by.get(launcher, [])
                cells.append(f"{min(values):.3g}-{max(values):.3g} ({len(values)})" if values
                             else "-")
            print(f"  {name:46}" + "".join(f"{cell:>18}" for cell in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
