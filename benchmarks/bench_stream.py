"""Benchmark: the streamed ladder (one decoder block at a time from safetensors shards) on an HF folder.

Runs ``forensics.models.stream.LayerStream(FOLDER).states(ids)`` over every block for the first T tokens of
a capture (or random ids), in a fresh process so the peak RSS is this run's, and prints bytes read per
shard and in all, peak RSS against the budget and the weights' size, and seconds per block. With
``--capture`` every slot is also matched (median per-token relative error of the best r and runner-up).

Make a model first (not committed; delete it afterwards)::

    .venv/bin/python scripts/make_random_model.py llama-1b /tmp/rand-llama-1b
    .venv/bin/python benchmarks/bench_stream.py /tmp/rand-llama-1b --tokens 128 [--capture data_0.pt]
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="HF folder: config.json + safetensors shards")
    ap.add_argument("--tokens", type=int, default=128, help="first T tokens (default 128)")
    ap.add_argument("--capture", help="a capture file: its input_ids are used and its slots matched")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="compute dtype")
    ap.add_argument("--max-memory", default=None, help="budget to check against, e.g. 1GB")
    a = ap.parse_args(argv)
    import torch

    import forensics
    from forensics.analysis.fingerprint.ladder import ladder_entry
    from forensics.models.shards import current_rss, peak_rss
    from forensics.models.stream import LayerStream
    from forensics.models.target import parse_memory

    cap = forensics.load(a.capture) if a.capture else None
    if cap is not None and cap.input_ids is not None:
        ids = cap.input_ids.reshape(-1)[: a.tokens]
    else:
        ids = torch.randint(0, 1000, (a.tokens,), generator=torch.Generator().manual_seed(0))
    budget = parse_memory(a.max_memory)
    rss0 = current_rss()
    stream = LayerStream(a.folder, compute_dtype=a.dtype, max_memory=budget)
    xs = [s.tensor()[: ids.numel()].float() for s in cap.slots] if cap is not None else []
    tables: list[list[dict]] = [[] for _ in xs]
    t0 = time.perf_counter()
    for r, h in stream.states(ids):
        for x, t in zip(xs, tables, strict=True):
            if x.shape == h.shape:
                t.append(ladder_entry(x, h, r))
    wall = time.perf_counter() - t0
    st = stream.stats.to_dict()
    print(f"{a.folder}: {stream.model_type}, L = {stream.num_layers}, H = {stream.hidden_size}, "
          f"{len(stream.index)} tensors in {len({i.file for i in stream.index.values()})} shards, "
          f"{stream.weights_bytes() / 1e9:.3f} GB of weights on disk")
    print(f"tokens {int(ids.numel())}, compute {a.dtype}")
    for name, n in st["bytes_by_shard"].items():
        print(f"  read {n / 1e6:10.1f} MB  {name}")
    print(f"bytes read: {st['bytes_read'] / 1e9:.3f} GB ({st['bytes_read'] / stream.weights_bytes():.0%} of the "
          "weights)")
    if st["experts_read"]:
        print(f"routed experts read per block: {st['experts_read']}")
    print(f"peak RSS: {peak_rss() / 1e9:.3f} GB (process before the stream: {rss0 / 1e9:.3f} GB"
          + (f"; budget {budget / 1e9:.3f} GB" if budget else "") + ")")
    print(f"seconds per block: {st['seconds_per_block']:.2f} (wall {wall:.1f} s for {st['blocks_run']} blocks, "
          f"torch threads {torch.get_num_threads()})")
    for i, t in enumerate(tables):
        t.sort(key=lambda e: e["rel"])
        if t:
            b, ru = t[0], (t[1] if len(t) > 1 else None)
            print(f"  slot {i}: best r = {b['r']} (rel {b['rel']:.4f}, cos {b['cos']:.5f})"
                  + (f", runner-up r = {ru['r']} (rel {ru['rel']:.3f})" if ru else "")
                  + (f", declared {cap.slots[i].declared_r}" if cap is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
