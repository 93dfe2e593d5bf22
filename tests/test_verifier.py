"""The probe's verifier: the plain-torch Llama gives transformers' ``LlamaForCausalLM`` logits bit for bit
(random tiny Llamas here, the packaged SmolLM2 in the model test), packed or one sequence at a time, and
anything it does not replay goes to transformers."""

from __future__ import annotations

import json
import os

import pytest
import torch

from forensics.errors import ForensicsError
from forensics.models import verifier as vf
from forensics.models.target import Target, model_facts
from forensics.models.verifier import Verifier, load_plain, open_verifier, plain_folder

pytestmark = pytest.mark.usefixtures("one_torch_thread")
VOCAB = 101


def _tiny_llama(folder, tie: bool = True, shard: bool = False, **over):
    """A random 2-layer Llama with grouped-query attention, saved as an HF safetensors folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie, rms_norm_eps=1e-5,
                      **over)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # scale the init up so the logits spread (HF's 0.02 init gives near-uniform rows)
        for p in m.parameters():
            p.mul_(20.0 if p.dim() > 1 else 1.0)
    m.save_pretrained(folder, **({"max_shard_size": "100KB"} if shard else {}))
    return m


@pytest.mark.parametrize(("tie", "shard"), [(True, False), (False, True)])
def test_plain_llama_is_transformers_bit_for_bit(tmp_path, tie, shard):
    m = _tiny_llama(tmp_path, tie=tie, shard=shard)
    assert plain_folder(str(tmp_path)) == str(tmp_path)
    assert (tmp_path / "model.safetensors.index.json").is_file() == shard
    v = load_plain(str(tmp_path))
    seqs = [torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(n)) for n in (1, 7, 33, 20)]
    with torch.no_grad():
        ref = [m(input_ids=s[None], use_cache=False).logits[0] for s in seqs]
    for s, r in zip(seqs, ref, strict=True):
        assert torch.equal(v.logits(s), r)
    # packed rows are each sequence's own bits: one forward over 7 + 33 + 20 tokens, lm_head over all rows
    llama = v.logits.__self__
    packed = torch.nn.functional.linear(llama.hidden(seqs[1:]), v.lm_head)
    assert torch.equal(packed, torch.cat(ref[1:]))
    # predictions: every sequence in one forward, and split over several packs, gives each one's argmax
    assert all(torch.equal(p, r.argmax(-1)) for p, r in zip(v.predictions(seqs), ref, strict=True))
    vf.PACK_TOKENS, old = 30, vf.PACK_TOKENS
    try:  # the replay itself (v.predictions would read the disk cache the first call wrote)
        assert all(torch.equal(p, r.argmax(-1)) for p, r in zip(llama.predictions(seqs), ref, strict=True))
    finally:
        vf.PACK_TOKENS = old
    assert v.plain and v.facts == model_facts(m)
    assert torch.equal(v.embed, m.get_input_embeddings().weight) and torch.equal(v.lm_head, m.lm_head.weight)
    assert torch.equal(v.norm_weight, m.model.norm.weight) and v.norm_eps == m.model.norm.variance_epsilon


def test_predictions_are_cached_on_disk_keyed_by_weights_and_ids(tmp_path, monkeypatch):
    """A probe run again on the same capture reads the verifier's greedy tokens back instead of running the model;
    another id sequence, another config or other weights of the same size (``cp -p``: same size and mtime) run it
    again, a touched shard does not; a corrupt cache file is recomputed; nothing is written to the model folder."""
    import shutil

    import forensics.models.target as target

    monkeypatch.setattr(target, "CACHE_DIR", str(tmp_path / "cache"))
    m = _tiny_llama(tmp_path / "m")
    folder = str(tmp_path / "m")
    seqs = [torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(n)) for n in (7, 33)]
    with torch.no_grad():
        ref = [m(input_ids=s[None], use_cache=False).logits[0].argmax(-1) for s in seqs]
    calls = []
    real = vf._PlainLlama.predictions
    monkeypatch.setattr(vf._PlainLlama, "predictions", lambda self, xs: calls.append(len(xs)) or real(self, xs))
    v = load_plain(folder)
    assert all(torch.equal(p, r) for p, r in zip(v.predictions(seqs), ref, strict=True)) and calls == [2]
    assert all(torch.equal(p, r) for p, r in zip(v.predictions(seqs), ref, strict=True)) and calls == [2]  # read
    files = sorted((tmp_path / "cache" / vf.PREDICTIONS_DIR).rglob("*.npy"))
    assert len(files) == 2 and not list((tmp_path / "m").rglob("*.npy"))
    files[0].write_bytes(b"not numpy")  # a corrupt entry is recomputed, never trusted
    assert all(torch.equal(p, r) for p, r in zip(v.predictions(seqs), ref, strict=True)) and calls == [2, 1]
    other = torch.randint(0, VOCAB, (9,), generator=torch.Generator().manual_seed(99))
    v.predictions([other])
    assert calls == [2, 1, 1]
    shard = tmp_path / "m" / "model.safetensors"  # touched, same bytes: the same model, read from the cache
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    load_plain(folder).predictions(seqs)
    assert calls == [2, 1, 1]
    # another model's weights of the same size copied over with cp -p (size and mtime kept): not the old tokens
    torch.manual_seed(1)
    m2 = _tiny_llama(tmp_path / "m2")
    with torch.no_grad():
        for p in m2.parameters():
            p.copy_(torch.randn_like(p) * 3)
        m2.save_pretrained(tmp_path / "m2")
        ref2 = [m2(input_ids=s[None], use_cache=False).logits[0].argmax(-1) for s in seqs]
    st = shard.stat()
    shutil.copyfile(tmp_path / "m2" / "model.safetensors", shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert shard.stat().st_size == st.st_size
    got = load_plain(folder).predictions(seqs)
    assert calls == [2, 1, 1, 2] and all(torch.equal(p, r) for p, r in zip(got, ref2, strict=True))
    cfg = tmp_path / "m" / "config.json"  # an edited config (another norm eps) is another model too
    cfg.write_text(cfg.read_text().replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 0.5'))
    load_plain(folder).predictions(seqs)
    assert calls == [2, 1, 1, 2, 2]


@pytest.mark.parametrize("entry", ["empty", "fifo", "npz", "object", "pickle", "float", "huge", "dir"])
def test_a_damaged_or_crafted_cache_entry_is_a_miss(tmp_path, monkeypatch, entry):
    """A zero-length entry (a crash after the rename), a FIFO (never opened for a blocking read), an ``.npz``, an
    object or pickled array, another dtype, an oversized file or a folder where an entry goes: recomputed, the
    right tokens, no error, no hang."""
    import numpy as np

    import forensics.models.target as target

    monkeypatch.setattr(target, "CACHE_DIR", str(tmp_path / "cache"))
    m = _tiny_llama(tmp_path / "m")
    v = load_plain(str(tmp_path / "m"))
    seq = torch.randint(0, VOCAB, (11,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m(input_ids=seq[None], use_cache=False).logits[0].argmax(-1)
    v.predictions([seq])
    (path,) = (tmp_path / "cache" / vf.PREDICTIONS_DIR).rglob("*.npy")
    path.unlink()
    if entry == "empty":
        path.write_bytes(b"")
    elif entry == "fifo":
        os.mkfifo(path)
    elif entry == "npz":
        np.savez(open(path, "wb"), a=np.zeros(11, np.int32))
    elif entry == "object":
        np.save(path, np.array([None] * 11, dtype=object), allow_pickle=True)
    elif entry == "pickle":
        import pickle

        path.write_bytes(pickle.dumps(list(range(11))))
    elif entry == "float":
        np.save(path, np.zeros(11, np.float32))
    elif entry == "huge":
        np.save(path, np.zeros(1 << 20, np.int32))
    else:
        path.mkdir()
    (got,) = v.predictions([seq])
    assert torch.equal(got, ref)


def test_a_read_only_cache_folder_is_skipped(tmp_path, monkeypatch):
    import forensics.models.target as target

    ro = tmp_path / "cache"
    ro.mkdir()
    monkeypatch.setattr(target, "CACHE_DIR", str(ro / "below-a-file"))
    (ro / "below-a-file").write_text("not a folder")  # makedirs fails whatever the user's privileges
    m = _tiny_llama(tmp_path / "m")
    seq = torch.randint(0, VOCAB, (5,), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = m(input_ids=seq[None], use_cache=False).logits[0].argmax(-1)
    (got,) = load_plain(str(tmp_path / "m")).predictions([seq])
    assert torch.equal(got, ref) and not list(ro.rglob("*hsf-tmp*"))


def test_packs_and_row_blocks_never_make_a_one_row_product():
    assert vf._packs([7, 33, 20, 1, 5, 30], 40) == [[0, 1], [2], [3], [4, 5]]
    assert vf._packs([1, 1, 2], 100) == [[0], [1], [2]]
    assert vf.row_blocks(7, 3) == [slice(0, 3), slice(3, 7)] and vf.row_blocks(8, 3)[-1] == slice(6, 8)
    assert vf.row_blocks(1, 3) == [slice(0, 1)]


@pytest.mark.parametrize("change", [{"attention_bias": True}, {"hidden_act": "gelu"}, {"model_type": "qwen2"},
                                    {"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}},
                                    {"architectures": ["LlamaForSequenceClassification"]}])
def test_configs_the_replay_does_not_cover_go_to_transformers(tmp_path, change):
    _tiny_llama(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(change)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert plain_folder(str(tmp_path)) is None


def test_missing_tensor_and_budget_are_one_line_errors(tmp_path):
    from safetensors.torch import load_file, save_file

    _tiny_llama(tmp_path)
    over = Target(path=str(tmp_path), max_memory=1)  # a budget nothing fits: refused, never loaded
    with pytest.raises(ForensicsError, match="max-memory"):
        open_verifier(over)
    w = load_file(str(tmp_path / "model.safetensors"))
    w.pop("model.layers.1.mlp.up_proj.weight")
    save_file(w, str(tmp_path / "model.safetensors"))
    with pytest.raises(ForensicsError, match="up_proj"):
        load_plain(str(tmp_path))


def test_a_loaded_model_is_wrapped_not_replayed(tmp_path):
    from forensics.models.target import load_model

    m = _tiny_llama(tmp_path)
    v = open_verifier(m)
    assert isinstance(v, Verifier) and not v.plain and open_verifier((m, None)).facts == v.facts
    assert open_verifier(str(tmp_path)).plain  # not loaded yet: the plain replay
    load_model(str(tmp_path))  # loaded through transformers in this process: reused, not loaded twice
    assert not open_verifier(str(tmp_path)).plain
    s = torch.arange(9)
    with torch.no_grad():
        assert torch.equal(v.predictions([s])[0], m(input_ids=s[None]).logits[0].argmax(-1))


@pytest.mark.model
def test_default_model_replays_smollm2_bit_for_bit(smollm2, sample_data):
    import forensics
    from forensics.models.target import default_model_path

    v = load_plain(plain_folder(default_model_path()))  # open_verifier would reuse the fixture's loaded model
    assert v.plain and v.facts == model_facts(smollm2[0])
    seqs = [forensics.load(p).input_ids.reshape(-1).long()
            for p in sorted((sample_data / "speculators_v1").glob("data_*.pt"))]
    with torch.no_grad():
        ref = [smollm2[0](input_ids=s[None], use_cache=False).logits[0] for s in seqs]
    assert torch.equal(v.logits(seqs[0]), ref[0])
    assert all(torch.equal(p, r.argmax(-1)) for p, r in zip(v.predictions(seqs), ref, strict=True))
