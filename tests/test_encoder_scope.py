"""Data-only verdicts on a capture outside the pre-norm-decoder pattern: an encoder whose embedding output adds
absolute positions (so repeated ids give different rows) must not have a correct ``embed`` claim FAILed."""

import torch

from forensics.analysis.fingerprint.core import fingerprint
from forensics.findings import Verdict
from forensics.models.recorder import TextSample, write_sample

T, H, VOCAB = 96, 64, 12


def _encoder_states(sink: bool) -> list[torch.Tensor]:
    """BERT-like: LayerNorm(token + position) embedding, then 3 post-LN blocks mixing in the running mean."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (T,), generator=g)
    ln = torch.nn.functional.layer_norm
    h = ln(torch.randn(VOCAB, H, generator=g)[ids] + 0.5 * torch.randn(T, H, generator=g), (H,))
    states = [h]
    for _ in range(3):
        ctx = torch.cumsum(h, 0) / torch.arange(1, T + 1)[:, None]
        h = ln(h + ctx @ (torch.randn(H, H, generator=g) / H ** 0.5), (H,))
        states.append(h)
    if sink:  # a massive activation at token 0, one dim, as pre-norm decoders' residual streams carry
        states[2] = states[2].clone()
        states[2][0] = 0.0
        states[2][0, 7] = 50.0 * float(states[2][1:].norm(dim=-1).median())
    return [s.to(torch.bfloat16).contiguous() for s in states], ids.tolist()


def _verdict(tmp_path, sink: bool):
    states, ids = _encoder_states(sink)
    path = tmp_path / ("sink" if sink else "plain") / "data_0.pt"
    write_sample("speculators-v1", str(path), TextSample("t", "", False, ids, [1] * T), states, [0, 1, 2, 3])
    fp = fingerprint(str(path), layers=[0, 1, 2, 3])
    repeated = next(e for e in fp.slots[0].evidence if e.signal == "dup_rows")
    return fp, repeated


def test_repeated_ids_that_differ_do_not_exclude_an_embedding_without_a_decoder_signature(tmp_path):
    fp, repeated = _verdict(tmp_path, sink=False)
    assert repeated.value == 0  # the embedding output's repeated ids really differ (positions were added)
    assert fp.verdict != Verdict.FAIL
    assert not [f for f in fp.findings if f.kind in ("shifted", "missing_embedding")]


def test_with_a_massive_sink_the_same_rows_exclude_an_embedding(tmp_path):
    fp, repeated = _verdict(tmp_path, sink=True)
    assert repeated.value == 0
    assert any(f.kind in ("shifted", "missing_embedding") for f in fp.findings)
