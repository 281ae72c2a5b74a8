"""docs/benchmarks.png, drawn from a full run's raw results (`bench/report.py --chart`).
Needs matplotlib, imported only when drawing: bench/run runs this with its venv's python."""

from .figures import LAYOUT_CEILING, index, med


def chart(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = index(res["single"])
    peers = list(dict.fromkeys(p for p, _ in runs))
    conns = sorted({c for _, c in runs})
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    width = 0.8 / len(peers)
    for i, p in enumerate(peers):
        xs = [j + i * width for j in range(len(conns))]
        rps = [med([r["requests_per_s"] for r in runs.get((p, c), [])]) or 0 for c in conns]
        p99 = [med([r["p99_us"] for r in runs.get((p, c), [])]) or 0 for c in conns]
        axes[0].bar(xs, rps, width, label=p)
        axes[1].bar(xs, p99, width, label=p)
    for ax, title in ((axes[0], "Single ID: requests/s (higher is better)"),
                      (axes[1], "Single ID: p99 latency, µs (log; lower is better)")):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(conns))])
        ax.set_xticklabels([f"{c} conn." for c in conns])
        ax.set_title(title, fontsize=10)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=8)
    b = index(res["batches"])
    names = [p for p, c in b if c == 1]
    vals = [med([r["ids_per_s"] for r in b[(p, 1)]]) / 1e6 for p in names]
    axes[2].barh(range(len(names)), vals, color=["C0" if n.startswith("kubeflake") else "C2" for n in names])
    axes[2].axvline(LAYOUT_CEILING / 1e6, color="red", linestyle="--", label="layout ceiling 4.096M/s")
    axes[2].set_yticks(range(len(names)))
    axes[2].set_yticklabels([n.replace(" (a block per call)", "").replace(" (generate_series)", "") for n in names], fontsize=8)
    axes[2].set_xscale("log")
    axes[2].set_title("Batches, 1 connection: million IDs/s (log)", fontsize=10)
    axes[2].legend(fontsize=8)
    fig.suptitle(f"kubeflake side by side ({res['started']}, {res['machine']['nproc']} cores, "
                 f"medians of {res['reps']} runs)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
