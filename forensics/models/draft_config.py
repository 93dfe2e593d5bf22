"""Read an EAGLE-3 draft checkpoint: its config.json (any style) and its weights' safetensors header.

Styles of ``config.json`` (speculators, SGLang/SpecForge, vLLM/EAGLE):
- ``speculators``: ``speculators_model_type: "eagle3"``, ``transformer_layer_config``, ids at the
  top level (``eagle_aux_hidden_state_layer_ids``), ``speculators_config.verifier``.
- ``sglang`` (also SpecForge exports): HF-style ``LlamaForCausalLMEagle3`` with the ids nested in
  ``eagle_config.eagle_aux_hidden_state_layer_ids``.
- ``vllm``: HF-style with the ids at the top level, no speculators wrapper.
- ``eagle``: SafeAILab/EAGLE-3 configs with no ids at all (layers hard-coded).

Weights: only the safetensors **header** is parsed (``fc.weight`` shape, weight names); the two small
vocab maps ``d2t`` / ``t2d`` are the only tensors read.

Example:
    >>> info = read_draft("path/to/draft")                     # doctest: +SKIP
    >>> info.ids_nested, info.ids_top, info.fc_shape, info.name_scheme   # doctest: +SKIP
    ([2, 30, 58], None, (7168, 21504), 'midlayer')
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field

from forensics.errors import ForensicsError, escape
from forensics.io import limits
from forensics.io.formats._io import SafetensorsFile, load_json
from forensics.models import conventions as cv
from forensics.models.conventions.rules import FAMILY_KEYS

WEIGHT_FILES = ("model.safetensors", "pytorch_model.safetensors", "pytorch_model.bin")  # a draft folder's weights
_MISSING = object()


@dataclass
class VocabMapCheck:
    """What the ``d2t`` / ``t2d`` tensors hold, and whether they are valid."""

    d2t_dtype: str | None = None
    d2t_shape: list[int] | None = None
    t2d_dtype: str | None = None
    t2d_shape: list[int] | None = None
    t2d_sum: int | None = None
    d2t_targets_in_range: bool | None = None  # i + d2t[i] in [0, V)
    d2t_targets_increasing: bool | None = None
    maps_agree: bool | None = None  # t2d[i + d2t[i]] is True for every draft index i
    looks_like_absolute_ids: bool | None = None  # d2t holds target ids, not offsets
    problems: list[str] = field(default_factory=list)


@dataclass
class DraftInfo:
    """Everything the audit needs from a draft checkpoint folder."""

    path: str
    config_path: str | None
    weights_path: str | None
    style: str  # speculators | sglang | vllm | eagle | unknown
    config: dict
    ids_top: list | None  # top-level eagle_aux_hidden_state_layer_ids (None: absent)
    ids_nested: list | None  # eagle_config.eagle_aux_hidden_state_layer_ids (None: absent)
    use_aux_hidden_state: bool | None
    num_aux_hidden_states: int | None  # sglang#24663 explicit count
    hidden_size: int | None  # the draft's own hidden size
    target_hidden_size: int | None  # the target width its fc expects per aux slot
    draft_vocab_size: int | None
    vocab_size: int | None  # target vocab (V)
    architectures: list[str]
    verifier: str | None
    fc_shape: tuple[int, ...] | None = None
    name_scheme: str | None = None  # "layers.0" | "midlayer" | "mixed" | None (no weights)
    weight_names: list[str] = field(default_factory=list)
    vocab: VocabMapCheck | None = None
    notes: list[str] = field(default_factory=list)
    family: str = "eagle3"  # eagle3 | eagle3.1 | p-eagle | dflash | dspark | mtp (conventions.detect_family)
    family_ids: dict = field(default_factory=dict)  # every id list the family may use, by dotted key, as found
    num_draft_layers: int | None = None  # the draft's own depth (DFlash sizes its default ids from it)

    @property
    def fc_aux_count(self) -> int | None:
        """How many aux states the fc takes: ``fc.weight.shape[1] / target_hidden``."""
        h = self.target_hidden_size or self.hidden_size
        if not self.fc_shape or len(self.fc_shape) != 2 or not h:
            return None
        return self.fc_shape[1] // h if self.fc_shape[1] % h == 0 else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("config")
        d["fc_shape"] = list(self.fc_shape) if self.fc_shape else None
        d["weight_names"] = self.weight_names[:40]
        return d

    def __repr__(self) -> str:
        return (f"DraftInfo({os.path.basename(self.path.rstrip('/')) or self.path}, style={self.style}, "
                f"ids_top={self.ids_top}, ids_nested={self.ids_nested}, fc={list(self.fc_shape or [])}, "
                f"names={self.name_scheme})")


def _find(path: str) -> tuple[str | None, str | None]:
    """(config.json, weights) for a folder, a config.json or a safetensors file."""
    if os.path.isdir(path):
        cfg = os.path.join(path, "config.json")
        w = next((os.path.join(path, n) for n in WEIGHT_FILES
                  if n.endswith(".safetensors") and os.path.isfile(os.path.join(path, n))), None)
        if w is None:
            w = next((os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith(".safetensors")), None)
        return (cfg if os.path.isfile(cfg) else None), w
    if path.endswith(".safetensors"):
        cfg = os.path.join(os.path.dirname(path), "config.json")
        return (cfg if os.path.isfile(cfg) else None), path
    return path, None


def sub_dict(cfg: dict, key: str) -> dict:
    """``cfg[key]`` when it is a JSON object, else ``{}`` (configs nest optional sections)."""
    v = cfg.get(key)
    return v if isinstance(v, dict) else {}


def load_json_object(path: str, what: str = "draft config") -> dict:
    """A JSON object from ``path``; unreadable, invalid or non-object files become a ForensicsError
    naming the file and ``what`` it was meant to be."""
    cfg = load_json(path, what)  # bounded size and depth: a one-line error, never a RecursionError
    if not isinstance(cfg, dict):
        raise ForensicsError(f"{what} is not a JSON object", path=path)
    return cfg


def _style(cfg: dict) -> str:
    nested = isinstance(cfg.get("eagle_config"), dict) and "eagle_aux_hidden_state_layer_ids" in cfg["eagle_config"]
    if cfg.get("speculators_model_type") or "speculators_config" in cfg or "transformer_layer_config" in cfg:
        return "speculators"
    if nested or isinstance(cfg.get("eagle_config"), dict):
        return "sglang"
    if "eagle_aux_hidden_state_layer_ids" in cfg:
        return "vllm"
    arch = " ".join(cfg.get("architectures") or [])
    return "eagle" if "eagle" in arch.lower() or "draft_vocab_size" in cfg else "unknown"


def _int(x) -> int | None:
    """A size from a draft config (checked by :func:`_check_sizes` first): an int, else None."""
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


SIZE_LIMITS = {"hidden_size": limits.MAX_HIDDEN_SIZE, "target_hidden_size": limits.MAX_HIDDEN_SIZE,
               "num_hidden_layers": limits.MAX_NUM_LAYERS, "num_aux_hidden_states": limits.MAX_SLOTS_PER_FILE,
               "draft_vocab_size": limits.MAX_VOCAB_SIZE, "vocab_size": limits.MAX_VOCAB_SIZE}  # per size field


def _check_sizes(path: str | None, **sections: dict) -> None:
    """Every size field a draft config states is a whole number within a bound far above any public model (a
    ``NaN``, ``1e400`` or ``10**30`` is one line naming the file and the field, never a traceback or a loop
    sized by it)."""
    for where, section in sections.items():
        for key, limit in SIZE_LIMITS.items():
            v = section.get(key)
            if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            name = key if where == "top" else f"{where}.{key}"
            if isinstance(v, float) and not (math.isfinite(v) and v.is_integer()):
                raise ForensicsError(f"draft config {name} = {v!r} is not a whole number", path=path)
            if not 0 <= v <= limit:
                raise ForensicsError(f"draft config {name} = {int(v)} is not plausible (expected 0 to {limit})",
                                     path=path)


ID_KEYS = tuple(dict.fromkeys(k for keys in FAMILY_KEYS.values() for k in keys))  # every key of an id list


def _check_id_lists(path: str | None, cfg: dict) -> None:
    """Every layer-id list a draft config holds is a JSON list of integers (at most ``MAX_NUM_LAYERS`` + 1 of
    them): the engines index layers with them, so ``["0", "3"]``, ``[[0], [3]]``, ``[0.5]``, ``true`` or a string
    is a config no engine serves, one line naming the file and the key, never a wiring verdict on garbage."""
    for key in ID_KEYS:
        v = cv.get_key(cfg, key)
        if v is None:
            continue
        ok = isinstance(v, list) and len(v) <= limits.MAX_NUM_LAYERS + 1 and all(
            isinstance(i, int) and not isinstance(i, bool) for i in v)
        if not ok:
            what = f"holds {len(v)} ids, more than the {limits.MAX_NUM_LAYERS + 1} a layer count allows" \
                if isinstance(v, list) and len(v) > limits.MAX_NUM_LAYERS + 1 else \
                f"= {escape(repr(v))[:80]} is not a list of integer layer ids"
            raise ForensicsError(f"draft config {key} {what}", path=path)


def read_draft(path: str | os.PathLike, read_vocab_maps: bool = True) -> DraftInfo:
    """Read a draft checkpoint folder (or its config.json / model.safetensors)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ForensicsError("no such draft file or folder", path=path)
    cfg_path, w_path = _find(path)
    if cfg_path is None and w_path is None:
        raise ForensicsError("no config.json and no *.safetensors in the draft folder", path=path)
    cfg = load_json_object(cfg_path) if cfg_path else {}
    inner = sub_dict(cfg, "transformer_layer_config")
    ec = sub_dict(cfg, "eagle_config")
    spec = sub_dict(cfg, "speculators_config")
    _check_sizes(cfg_path, top=cfg, transformer_layer_config=inner, eagle_config=ec)
    _check_id_lists(cfg_path, cfg)
    verifier = (spec.get("verifier") or {}).get("name_or_path") if isinstance(spec.get("verifier"), dict) else None
    hidden = _int(cfg.get("hidden_size")) or _int(inner.get("hidden_size"))
    info = DraftInfo(
        path=path, config_path=cfg_path, weights_path=w_path, style=_style(cfg) if cfg else "unknown", config=cfg,
        ids_top=cfg.get("eagle_aux_hidden_state_layer_ids"),
        ids_nested=ec.get("eagle_aux_hidden_state_layer_ids"),
        use_aux_hidden_state=ec.get("use_aux_hidden_state"),
        num_aux_hidden_states=_int(cfg.get("num_aux_hidden_states")) or _int(ec.get("num_aux_hidden_states")),
        hidden_size=hidden,
        target_hidden_size=_int(cfg.get("target_hidden_size")) or hidden,
        draft_vocab_size=_int(cfg.get("draft_vocab_size")),
        vocab_size=_int(inner.get("vocab_size")) or _int(cfg.get("vocab_size")),
        architectures=list(cfg.get("architectures") or []), verifier=verifier,
    )
    _read_family(info, cfg, inner)
    if cfg_path is None:
        info.notes.append("no config.json next to the weights: ids unknown")
    if w_path:
        _read_weights(info, w_path, read_vocab_maps)
    elif cfg_path and os.path.isdir(path) and any(n.endswith(".bin") for n in os.listdir(path)):
        info.notes.append("weights are pytorch_model.bin: not inspected (only safetensors headers are read)")
    return info


def _read_family(info: DraftInfo, cfg: dict, inner: dict) -> None:
    """The drafter family and every id list it may hold: EAGLE-3/3.1/P-EAGLE top-level or nested ids, DFlash
    ``dflash_config.target_layer_ids`` (z-lab, vLLM, SGLang) or speculators' ``aux_hidden_state_layer_ids``,
    DSpark ``dspark_target_layer_ids`` (vLLM) or ``target_layer_ids`` (NeMo Automodel)."""

    info.family = cv.detect_family(cfg)
    info.family_ids = {k: v for k in FAMILY_KEYS[info.family] if (v := cv.get_key(cfg, k)) is not None}
    info.num_draft_layers = _int(cfg.get("num_hidden_layers")) or _int(inner.get("num_hidden_layers"))
    if info.family not in ("eagle3", "eagle3.1", "p-eagle") and info.family_ids:
        info.notes.append(f"{info.family} draft: ids {info.family_ids}")


def _read_weights(info: DraftInfo, w_path: str, read_vocab_maps: bool) -> None:
    sf = SafetensorsFile(w_path)
    names = sf.keys()
    info.weight_names = sorted(names)
    fc = next((n for n in names if n in ("fc.weight", "model.fc.weight")), None)
    info.fc_shape = sf.shape(fc) if fc else None
    has_layers0 = any(n.startswith(("layers.0.", "model.layers.0.")) for n in names)
    has_mid = any(n.startswith(("midlayer.", "model.midlayer.")) for n in names)
    info.name_scheme = "mixed" if has_layers0 and has_mid else "layers.0" if has_layers0 else \
        "midlayer" if has_mid else None
    if info.vocab_size is None:
        emb = next((n for n in names if n.endswith("embed_tokens.weight")), None)
        if emb:
            info.vocab_size = sf.shape(emb)[0]
    if info.draft_vocab_size is None:
        head = next((n for n in names if n.endswith("lm_head.weight")), None)
        if head:
            info.draft_vocab_size = sf.shape(head)[0]
    if read_vocab_maps and ("d2t" in names or "t2d" in names):
        info.vocab = check_vocab_maps(sf, info.draft_vocab_size, info.vocab_size)


def check_vocab_maps(sf, draft_vocab_size: int | None, vocab_size: int | None) -> VocabMapCheck:
    """Validate d2t (int64 offsets of length Vd: target = i + d2t[i]) and t2d (bool of length V with
    ``sum == Vd``) as speculators ``train/vocab_mapping.py``, SpecForge ``preprocessing.py`` and EAGLE write
    them and SGLang/vLLM read them (``hot_token_id = d2t + arange``; ``targets = base + d2t``)."""
    import torch

    c = VocabMapCheck()
    names = sf.keys()
    d2t = t2d = None
    if "d2t" in names:
        c.d2t_dtype, c.d2t_shape = sf.dtype_name("d2t"), list(sf.shape("d2t"))
        d2t = sf.get("d2t")
        if d2t.dtype != torch.int64:
            c.problems.append(f"d2t dtype is {c.d2t_dtype}, expected I64 (offsets)")
        if d2t.dim() != 1 or (draft_vocab_size and d2t.numel() != draft_vocab_size):
            c.problems.append(f"d2t shape {c.d2t_shape}, expected [{draft_vocab_size}] (draft_vocab_size)")
    else:
        c.problems.append("t2d present but d2t missing")
    if "t2d" in names:
        c.t2d_dtype, c.t2d_shape = sf.dtype_name("t2d"), list(sf.shape("t2d"))
        t2d = sf.get("t2d")
        if t2d.dtype != torch.bool:
            c.problems.append(f"t2d dtype is {c.t2d_dtype}, expected BOOL")
        if t2d.dim() != 1 or (vocab_size and t2d.numel() != vocab_size):
            c.problems.append(f"t2d shape {c.t2d_shape}, expected [{vocab_size}] (target vocab_size)")
        c.t2d_sum = int((t2d != 0).sum())
        if draft_vocab_size and c.t2d_sum != draft_vocab_size:
            c.problems.append(f"t2d has {c.t2d_sum} True entries, expected draft_vocab_size = {draft_vocab_size}")
    else:
        c.problems.append("d2t present but t2d missing")
    if d2t is not None and d2t.dim() == 1 and not d2t.is_floating_point():
        d = d2t.to(torch.int64)
        targets = torch.arange(d.numel(), dtype=torch.int64) + d
        v = vocab_size or (t2d.numel() if t2d is not None else None)
        c.d2t_targets_in_range = bool(((targets >= 0) & ((targets < v) if v else True)).all())
        c.d2t_targets_increasing = bool((targets[1:] > targets[:-1]).all()) if d.numel() > 1 else True
        if not c.d2t_targets_in_range:
            c.problems.append(f"d2t offsets give target ids outside [0, {v}): i + d2t[i] must be a token id")
        # Absolute ids stored where offsets belong: d itself is strictly increasing and i + d overshoots.
        c.looks_like_absolute_ids = bool(d.numel() > 1 and (d[1:] > d[:-1]).all() and d[0] >= 0
                                         and not c.d2t_targets_in_range)
        if c.looks_like_absolute_ids:
            c.problems.append("d2t looks like absolute target ids, not offsets (engines compute i + d2t[i])")
        if t2d is not None and c.d2t_targets_in_range and t2d.dim() == 1:
            c.maps_agree = bool(t2d.bool()[targets].all())
            if not c.maps_agree:
                c.problems.append("d2t and t2d disagree: some i + d2t[i] is not marked True in t2d")
    return c
