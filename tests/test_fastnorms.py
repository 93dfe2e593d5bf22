"""The scan's fused bf16 norm kernel (forensics.analysis.fastnorms): float64 references, and the same decisions.

The kernel sums float32 squares in another order than torch's reduction, so its norms are compared with a float64
reference to float32 accumulation error (a few float32 ulps of the norm, not of each element), and the scan rows
and fingerprints computed with it must decide exactly what torch's kernel decides.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import torch

from forensics.analysis import fastnorms
from forensics.analysis.stats import token_norms

pytestmark = pytest.mark.skipif(not fastnorms.enable(), reason="numba is not installed (the 'fast' extra)")


def _norms(h: torch.Tensor) -> np.ndarray:
    out = np.empty(h.shape[0], np.float32)
    fastnorms.bf16_norms(h.view(torch.int16).numpy().view(np.uint16), out)
    return out


def _ulps(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.abs(got.astype(np.float64) - ref) / np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)


@pytest.mark.parametrize("H", [1, 7, 16, 576, 7168])
def test_norms_match_a_float64_reference(H):
    g = torch.Generator().manual_seed(H)
    scales = torch.logspace(-15, 15, 31)[torch.randint(0, 31, (64, 1), generator=g)]
    h = (torch.randn(64, H, generator=g, dtype=torch.float64) * scales).to(torch.bfloat16)
    h[3] = 0
    h[5, :1] = 1e-40  # a bf16 denormal, widened exactly
    ref = torch.linalg.vector_norm(h.double(), dim=-1).numpy()
    got = _norms(h)
    finite = np.isfinite(ref) & (ref < 1.8e19) & (ref > 1e-18)  # squares representable in float32
    assert finite.sum() > 30
    assert _ulps(got[finite], ref[finite]).max() <= 8  # float32 accumulation over H ≤ 7168 terms, any order
    assert got[3] == 0.0


def test_nan_inf_and_overflow_propagate_as_torch_does():
    h = torch.randn(6, 300).to(torch.bfloat16)
    h[0, 5] = float("nan")
    h[1, 7] = float("inf")
    h[2, 9] = float("-inf")
    h[3, :] = torch.finfo(torch.bfloat16).max  # finite values whose squares overflow float32
    got = _norms(h)
    want = torch.linalg.vector_norm(h, dim=-1, dtype=torch.float32).numpy()
    assert np.isnan(got[0]) and np.isnan(want[0])
    assert got[1] == got[2] == want[1] == want[2] == np.inf
    assert got[3] == want[3] == np.inf
    np.testing.assert_allclose(got[4:], want[4:], rtol=1e-6)


def test_scope_uses_the_kernel_only_inside_and_only_for_contiguous_bf16():
    h = torch.randn(40, 700).to(torch.bfloat16)
    outside = token_norms(h)
    assert torch.equal(outside, torch.linalg.vector_norm(h, dim=-1, dtype=torch.float32))  # torch's, bit for bit
    with fastnorms.scope() as on:
        assert on and fastnorms.active()
        inside = token_norms(h)
        strided = token_norms(h[:, ::2])  # not C-contiguous: torch's kernel
    assert not fastnorms.active()
    np.testing.assert_array_equal(inside.numpy(), _norms(h))
    assert torch.equal(strided, torch.linalg.vector_norm(h[:, ::2], dim=-1, dtype=torch.float32))


def _strip(x):
    """A result's decisions: every non-float leaf, and floats rounded to 4 significant digits."""
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in ("elapsed", "seconds")}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    if isinstance(x, float):
        return float(f"{x:.4g}")
    return x


def _bf16_captures(tmp_path):
    """Real SmolLM2 captures of sample_data saved again in bf16 (the dtype the kernel serves)."""
    import forensics

    out = []
    for p in sorted(glob.glob("sample_data/speculators_v1/*.pt"))[:4]:
        d = torch.load(p, weights_only=True)
        d["hidden_states"] = [h.to(torch.bfloat16).contiguous() for h in d["hidden_states"]]
        q = os.path.join(tmp_path, os.path.basename(p))
        torch.save(d, q)
        out.append(q)
    assert out and forensics.load(out[0]).slots[0].dtype == torch.bfloat16
    return out


def test_fingerprints_and_scan_rows_decide_the_same_with_either_kernel(tmp_path):
    import forensics
    from forensics.analysis.scan.rows import scan_batch

    paths = _bf16_captures(tmp_path)
    items = [(p, os.stat(p).st_size, os.stat(p).st_mtime_ns, True) for p in paths]
    plain = scan_batch(items, {"fused_norms": False})
    fused = scan_batch(items, {"fused_norms": True})
    assert _strip(plain) == _strip(fused)
    for p in paths:
        a = forensics.fingerprint(p).to_dict()
        with fastnorms.scope():
            b = forensics.fingerprint(p).to_dict()
        assert _strip(a) == _strip(b)


def test_a_scan_uses_the_kernel_only_where_its_bytes_pay_for_loading_it(tmp_path, monkeypatch):
    import subprocess
    import sys

    import forensics
    from forensics.analysis.scan import core

    assert not core.fused_norms_pay(core.FUSED_NORMS_MIN_BYTES - 1) and core.fused_norms_pay(core.FUSED_NORMS_MIN_BYTES)
    paths = _bf16_captures(tmp_path)
    code = ("import sys, forensics; forensics.scan(sys.argv[1], workers=0, progress=False); "
            "print('numba' in sys.modules)")
    small = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert small.stdout.strip().splitlines()[-1] == "False", small.stderr[-2000:]  # a small scan never imports numba

    calls = []
    real = fastnorms.bf16_norms
    monkeypatch.setattr(fastnorms, "bf16_norms", lambda bits, out: calls.append(bits.shape) or real(bits, out))
    monkeypatch.setattr(core, "FUSED_NORMS_MIN_BYTES", 0)
    forensics.scan(str(tmp_path), workers=0, progress=False)
    assert len(calls) >= len(paths) and not fastnorms.active()  # used inside the scan's batches, not after


def test_the_kernel_runs_after_llvm_pages_are_given_back():
    from forensics.io.pages import release_libraries

    h = torch.randn(50, 333).to(torch.bfloat16)
    release_libraries(("llvmlite", "numba"))
    ref = torch.linalg.vector_norm(h.double(), dim=-1).numpy()
    assert _ulps(_norms(h), ref).max() <= 8


def test_the_fused_pass_reads_larger_blocks_and_gives_every_tap_each_row_once():
    """Inside the scope the norm pass reads FUSED_BLOCK_ROWS-row blocks (no float32 copy to keep in cache): every tap
    sees every row once, in order, the row hashes equal a strided read, the norms equal the kernel's on the whole
    slot and the median |x| the one outside the scope (the same sample)."""
    from forensics.analysis import kernels
    from forensics.analysis.rows import RowHashTaps, _row_hashes
    from forensics.analysis.stats import summarize
    from forensics.io.formats import as_capture

    g = torch.Generator().manual_seed(5)
    h = (torch.randn(1000, 576, generator=g) * 3).to(torch.bfloat16)
    cap = as_capture([h])
    seen: list[tuple[int, int]] = []
    ht = RowHashTaps(cap)
    with fastnorms.scope():
        st = summarize(cap, taps=lambda i: [*ht.taps(i), lambda s, b: seen.append((s, int(b.shape[0])))])
    outside = summarize(as_capture([h]))
    assert kernels.FUSED_BLOCK_ROWS > kernels.NORM_BLOCK_ROWS
    assert [s for s, _ in seen] == list(range(0, 1000, kernels.FUSED_BLOCK_ROWS))
    assert sum(n for _, n in seen) == 1000
    np.testing.assert_array_equal(st.slots[0].norms, _norms(h))
    assert st.slots[0].median_abs == outside.slots[0].median_abs
    (got,) = ht.hashes()
    assert got is not None and np.array_equal(got, _row_hashes(h))
