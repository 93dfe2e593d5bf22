"""EAGLE-3 draft loading (both naming schemes) and the step-0 forward, against independent references:
a float64 numpy implementation written here from speculators' Eagle3 layout (layers.0.*, fc, d2t), and
speculators 0.9.0's own ``Eagle3DraftModel`` on the same checkpoint."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from forensics.errors import ForensicsError
from forensics.models.draft import SCHEME_MIDLAYER, SCHEME_SPECULATORS, canonical_name, load_draft

pytestmark = pytest.mark.usefixtures("one_torch_thread")


H, V, VD, HEADS, KV, HD, INTER, EPS, THETA = 32, 97, 40, 4, 2, 8, 48, 1e-5, 10000.0


def _write_random_draft(folder, seed=0, norm_before_residual=False, midlayer=False, k=3):
    """A random draft written by hand in speculators (or EAGLE/SGLang ``midlayer``) layout."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*s, scale=0.3):
        return torch.randn(*s, generator=g) * scale

    p = "midlayer." if midlayer else "layers.0."
    sel = torch.randperm(V, generator=g)[:VD].sort().values
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[sel] = True
    w = {"fc.weight": rnd(H, k * H), p + "self_attn.q_proj.weight": rnd(HEADS * HD, 2 * H),
         p + "self_attn.k_proj.weight": rnd(KV * HD, 2 * H), p + "self_attn.v_proj.weight": rnd(KV * HD, 2 * H),
         p + "self_attn.o_proj.weight": rnd(H, HEADS * HD), p + "mlp.gate_proj.weight": rnd(INTER, H),
         p + "mlp.up_proj.weight": rnd(INTER, H), p + "mlp.down_proj.weight": rnd(H, INTER),
         p + "input_layernorm.weight": 1 + rnd(H, scale=0.1), p + "hidden_norm.weight": 1 + rnd(H, scale=0.1),
         p + "post_attention_layernorm.weight": 1 + rnd(H, scale=0.1), "norm.weight": 1 + rnd(H, scale=0.1),
         "lm_head.weight": rnd(VD, H), "embed_tokens.weight": rnd(V, H, scale=1.0),
         "d2t": sel - torch.arange(VD), "t2d": t2d}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(w, str(folder / "model.safetensors"))
    tl = {"model_type": "llama", "hidden_size": H, "num_attention_heads": HEADS, "num_key_value_heads": KV,
          "head_dim": HD, "intermediate_size": INTER, "rms_norm_eps": EPS, "vocab_size": V,
          "num_hidden_layers": 1, "rope_parameters": {"rope_theta": THETA, "rope_type": "default"}}
    if midlayer:  # SGLang / SpecForge style: flat Llama config, ids nested in eagle_config (r = id + 1)
        cfg = dict(tl, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=VD,
                   eagle_config={"eagle_aux_hidden_state_layer_ids": [-1, 2, 15], "use_aux_hidden_state": True})
    else:
        cfg = {"speculators_model_type": "eagle3", "architectures": ["Eagle3DraftModel"], "draft_vocab_size": VD,
               "norm_before_residual": norm_before_residual, "eagle_aux_hidden_state_layer_ids": [0, 3, 16],
               "transformer_layer_config": tl}
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _reference64(folder, fused, emb, positions, norm_before_residual=False):
    """Direct float64 numpy EAGLE-3 step 0, position by position (no code shared with forensics.models.draft)."""
    raw = {k: v.double().numpy() if v.is_floating_point() else v.numpy() for k, v in
           load_file(str(folder / "model.safetensors")).items()}
    p = "midlayer." if any(k.startswith("midlayer.") for k in raw) else "layers.0."
    W = lambda n: raw[p + n]  # noqa: E731

    def rms(x, gamma):
        return gamma * x / np.sqrt(np.mean(x * x) + EPS)

    def rotate(vec, pos):  # rotate_half RoPE: pairs (i, i + d/2) turned by pos * theta^(-2i/d)
        half = HD // 2
        out = vec.copy()
        for i in range(half):
            a = pos * THETA ** (-2 * i / HD)
            x1, x2 = vec[i], vec[i + half]
            out[i], out[i + half] = x1 * math.cos(a) - x2 * math.sin(a), x2 * math.cos(a) + x1 * math.sin(a)
        return out

    fused, emb = fused.double().numpy(), emb.double().numpy()
    T = fused.shape[0]
    hs = [raw["fc.weight"] @ fused[t] for t in range(T)]
    xs, res = [], []
    for t in range(T):
        hn = rms(hs[t], W("hidden_norm.weight"))
        xs.append(np.concatenate([rms(emb[t], W("input_layernorm.weight")), hn]))
        res.append(hn if norm_before_residual else hs[t])
    q = [(W("self_attn.q_proj.weight") @ x).reshape(HEADS, HD) for x in xs]
    k = [(W("self_attn.k_proj.weight") @ x).reshape(KV, HD) for x in xs]
    v = [(W("self_attn.v_proj.weight") @ x).reshape(KV, HD) for x in xs]
    logits = []
    for t in range(T):
        heads = []
        for h in range(HEADS):
            kvh = h // (HEADS // KV)
            qr = rotate(q[t][h], float(positions[t]))
            s = np.array([qr @ rotate(k[j][kvh], float(positions[j])) / math.sqrt(HD) for j in range(t + 1)])
            a = np.exp(s - s.max())
            a /= a.sum()
            heads.append(sum(a[j] * v[j][kvh] for j in range(t + 1)))
        h1 = res[t] + W("self_attn.o_proj.weight") @ np.concatenate(heads)
        m = rms(h1, W("post_attention_layernorm.weight"))
        gate = W("mlp.gate_proj.weight") @ m
        h2 = h1 + W("mlp.down_proj.weight") @ ((gate / (1 + np.exp(-gate))) * (W("mlp.up_proj.weight") @ m))
        logits.append(raw["lm_head.weight"] @ rms(h2, raw["norm.weight"]))
    return np.stack(logits)


def _inputs(T=9, k=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, k * H, generator=g), torch.randint(0, V, (T,), generator=g)


@pytest.mark.parametrize("nbr", [False, True])
def test_forward_matches_float64_reference(tmp_path, nbr):
    folder = _write_random_draft(tmp_path / "d", norm_before_residual=nbr)
    d = load_draft(folder)
    assert d.norm_before_residual is nbr and d.num_aux == 3 and d.num_heads == HEADS and d.num_kv_heads == KV
    fused, ids = _inputs()
    emb = d.embed[ids]
    ref = _reference64(folder, fused, emb, torch.arange(1, 10), norm_before_residual=nbr)
    out64 = d.forward(fused, emb, dtype=torch.float64).numpy()
    np.testing.assert_allclose(out64, ref, rtol=1e-10, atol=1e-10)
    out32 = d.forward(fused, emb).numpy()
    np.testing.assert_allclose(out32, ref, rtol=1e-4, atol=1e-4)
    # a batch dimension gives the same rows
    batched = d.forward(torch.stack([fused, fused]), torch.stack([emb, emb]), dtype=torch.float64)
    np.testing.assert_allclose(batched[1].numpy(), ref, rtol=1e-10, atol=1e-10)


def test_forward_is_causal(tmp_path):
    d = load_draft(_write_random_draft(tmp_path / "d"))
    fused, ids = _inputs()
    a = d.forward(fused, d.embed[ids])
    fused2 = fused.clone()
    fused2[-1] += 5.0  # changing the last position must not change earlier rows
    b = d.forward(fused2, d.embed[ids])
    assert torch.allclose(a[:-1], b[:-1]) and not torch.allclose(a[-1], b[-1])


def test_both_naming_schemes_load_to_identical_outputs(tmp_path):
    a = load_draft(_write_random_draft(tmp_path / "spec", seed=3))
    b = load_draft(_write_random_draft(tmp_path / "mid", seed=3, midlayer=True))
    assert a.scheme == SCHEME_SPECULATORS and b.scheme == SCHEME_MIDLAYER
    assert a.declared_ids == [0, 3, 16] and a.declared_ids_key == "eagle_aux_hidden_state_layer_ids"
    assert b.declared_ids == [-1, 2, 15] and b.declared_ids_key == "eagle_config.eagle_aux_hidden_state_layer_ids"
    assert sorted(a.weights) == sorted(b.weights)
    fused, ids = _inputs(seed=4)
    assert torch.equal(a.forward(fused, a.embed[ids]), b.forward(fused, b.embed[ids]))


def test_d2t_offsets_map_draft_index_to_target_id(tmp_path):
    d = load_draft(_write_random_draft(tmp_path / "d"))
    tids = d.target_ids()
    t2d = d.weights["t2d"]
    assert tids.shape == (VD,) and bool(t2d[tids].all()) and int(t2d.sum()) == VD
    assert torch.equal(tids, torch.nonzero(t2d).flatten())  # i + d2t[i] enumerates the kept ids in order


def test_canonical_names():
    assert canonical_name("midlayer.self_attn.q_proj.weight") == "layers.0.self_attn.q_proj.weight"
    assert canonical_name("model.midlayer.hidden_norm.weight") == "layers.0.hidden_norm.weight"
    assert canonical_name("model.fc.weight") == "fc.weight"
    assert canonical_name("draft_id_to_target_id") == "d2t"


def test_not_a_draft_is_a_clear_error(tmp_path):
    folder = _write_random_draft(tmp_path / "d")
    w = load_file(str(folder / "model.safetensors"))
    del w["fc.weight"]
    save_file(w, str(folder / "model.safetensors"))
    with pytest.raises(ForensicsError, match="fc.weight"):
        load_draft(folder)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ForensicsError, match="config.json"):
        load_draft(tmp_path / "empty")
    with pytest.raises(ForensicsError, match="no such"):
        load_draft(tmp_path / "nowhere")


@pytest.mark.parametrize("drop", ["layers.0.self_attn.k_proj.weight", "layers.0.mlp.down_proj.weight",
                                  "layers.0.hidden_norm.weight", "layers.0.post_attention_layernorm.weight"])
def test_a_draft_missing_a_layer_tensor_is_refused_at_load(tmp_path, drop):
    """Any tensor the forward reads, missing, is one error naming it at load (was a KeyError mid-probe)."""
    folder = _write_random_draft(tmp_path / "d")
    w = load_file(str(folder / "model.safetensors"))
    assert drop in w
    del w[drop]
    save_file(w, str(folder / "model.safetensors"))
    with pytest.raises(ForensicsError, match=drop.replace(".", r"\.")):
        load_draft(folder)


# ------------------------------------------------------------ speculators 0.9.0 as reference --

@pytest.fixture(scope="session")
def speculators_eagle3():
    pytest.importorskip("speculators")
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    return Eagle3DraftModel, Eagle3SpeculatorConfig


def _speculators_logits(model, fused, ids):
    """Step-0 logits of speculators' Eagle3DraftModel.forward (captured from its lm_head)."""
    got = {}
    hook = model.lm_head.register_forward_hook(lambda _m, _i, o: got.setdefault("logits", o))
    T = ids.numel()
    try:
        with torch.no_grad():
            model(hidden_states=fused[None], input_ids=ids[None], document_ids=torch.zeros(1, T, dtype=torch.long),
                  ttt_steps=1)
    finally:
        hook.remove()
    return got["logits"][0]


def test_logits_match_speculators_on_random_checkpoint(tmp_path, speculators_eagle3):
    Eagle3DraftModel, Eagle3SpeculatorConfig = speculators_eagle3
    folder = _write_random_draft(tmp_path / "d", seed=5)
    cfg = Eagle3SpeculatorConfig.from_pretrained(str(folder))
    model = Eagle3DraftModel(cfg).eval()
    missing, unexpected = model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    assert unexpected == [] and set(missing) <= {"verifier_lm_head.weight", "verifier_norm.weight"}
    fused, ids = _inputs(T=12, seed=6)
    ref = _speculators_logits(model, fused, ids)
    d = load_draft(folder)
    np.testing.assert_allclose(d.forward(fused, d.embed[ids]).numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


def test_committed_draft_loads_in_speculators_and_matches(smollm2, speculators_eagle3, sample_data, tmp_path):
    """sample_data/draft_eagle3: config keys ⊆ what speculators writes; weights load with no unexpected key;
    logits on a real capture equal speculators' (embedding supplied from SmolLM2: it is not saved)."""
    import forensics

    Eagle3DraftModel, Eagle3SpeculatorConfig = speculators_eagle3
    folder = sample_data / "draft_eagle3"
    if not folder.is_dir():
        pytest.skip("sample_data/draft_eagle3 not committed yet")
    ours = json.loads((folder / "config.json").read_text())
    cfg = Eagle3SpeculatorConfig.from_pretrained(str(folder))
    fresh = Eagle3SpeculatorConfig(transformer_layer_config=cfg.transformer_layer_config,
                                   speculators_config=cfg.speculators_config,
                                   eagle_aux_hidden_state_layer_ids=[0, 3, 16])
    fresh.save_pretrained(str(tmp_path))  # the keys speculators itself writes
    # + "dtype": HF PretrainedConfig writes it when the model carries one (Eagle3DraftModel.save_pretrained does)
    written = set(json.loads((tmp_path / "config.json").read_text())) | {"dtype"}
    assert set(ours) <= written, set(ours) - written
    assert set(ours["transformer_layer_config"]) <= set(cfg.transformer_layer_config.to_dict())
    model = Eagle3DraftModel(cfg).eval()
    sd = load_file(str(folder / "model.safetensors"))
    assert "embed_tokens.weight" not in sd
    m, _ = smollm2
    sd["embed_tokens.weight"] = m.get_input_embeddings().weight.detach().float()
    missing, unexpected = model.load_state_dict({k: v.float() if v.is_floating_point() else v
                                                 for k, v in sd.items()}, strict=False)
    assert unexpected == [] and set(missing) <= {"verifier_lm_head.weight", "verifier_norm.weight"}
    cap = forensics.load(sample_data / "speculators_v1" / "data_4.pt")
    ids = cap.input_ids.long()
    fused = torch.cat([cap.slots[i].tensor()[:-1].float() for i in range(3)], dim=-1)
    ref = _speculators_logits(model, fused, ids[1:])
    d = load_draft(folder)
    assert d.embed is None and d.declared_ids == [0, 3, 16]
    mine = d.forward(fused, sd["embed_tokens.weight"][ids[1:]])
    np.testing.assert_allclose(mine.numpy(), ref.numpy(), rtol=1e-4, atol=2e-4)
    assert torch.equal(mine.argmax(-1), ref.argmax(-1))
