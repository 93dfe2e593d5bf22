"""Every list a user can type goes through one parser (``forensics.layers.parse_layer_list`` for layers,
``parse_id_list`` for a system's ids): the parse is what the text says, and anything else is one ForensicsError
line (exit 2 from the CLI), never a traceback.
"""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.cli import main
from forensics.errors import ForensicsError
from forensics.layers import FINAL_POST, parse_id_list, parse_layer_list

TOKENS = ["embed", "L3", "3", "16", "L28", "final_post", "post", "L-1", "-1", "x", "L", "", ",", ";", " ", "\t",
          "²", "٣", "1e3", "+3", "0x10", "L--1", "9" * 30, "slot1", "None", "[", "]", "\n", "é", "\x00"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(TOKENS), max_size=8).map("".join) | st.text(max_size=40))
def test_any_text_parses_or_is_one_error(text):
    for parse in (parse_layer_list, parse_id_list):
        try:
            out = parse(text, "--x")
        except ForensicsError as e:
            assert "\n" not in str(e).strip() and str(e).startswith("--x ") and len(str(e)) < 400
            continue
        assert out and all(isinstance(r, int) and not isinstance(r, bool) or r == FINAL_POST for r in out)


@pytest.mark.parametrize("text, want", [
    ("embed L3 L16 L28", [0, 3, 16, 28]), ("embed,L3, 16 ,final_post", [0, 3, 16, FINAL_POST]),
    ("0\t3\n16", [0, 3, 16]), (["embed", 3, "L16"], [0, 3, 16]), ("post", [FINAL_POST])])
def test_layer_lists_parse_to_r(text, want):
    assert parse_layer_list(text) == want


@pytest.mark.parametrize("text", ["", " , ", "x", "L3,x", "²", "٣", "1e3", "+3", "L--1", "9" * 5000, "L", [True]])
def test_bad_layer_lists_are_one_error(text):
    with pytest.raises(ForensicsError, match=r"^layer list .*(names no layer|not an r value)"):
        parse_layer_list(text)


def test_id_lists():
    assert parse_id_list("2, 15 27") == [2, 15, 27] and parse_id_list("-1") == [-1]
    for bad in ("2,x", "", "2.0", "²", "9" * 5000, [True]):
        with pytest.raises(ForensicsError, match="^layer ids "):
            parse_id_list(bad)


def test_stamp_takes_a_space_separated_layer_list(sample_data, tmp_path, capsys):
    """``hsf stamp DIR --layers "embed L3 L16 L28"`` stamps every slot with those r (it raised a ValueError)."""
    folder = tmp_path / "v1"
    shutil.copytree(sample_data / "speculators_v1", folder)
    rc = main(["stamp", str(folder), "--layers", "embed L3 L16 L28", "--json", "-q"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["files"] and all(f["r"] == [0, 3, 16, 28] for f in doc["files"])


def _options(sample_data, tmp_path):
    """Every list option, as a function of the list typed."""
    v1 = str(sample_data / "speculators_v1" / "data_0.pt")
    draft = str(sample_data / "draft_eagle3")
    stamped = tmp_path / "stamped"
    shutil.copytree(sample_data / "speculators_v1", stamped)
    return {
        "fingerprint --layers": lambda t: ["fingerprint", v1, "--layers", t],
        "fingerprint --expect": lambda t: ["fingerprint", v1, "--expect", t],
        "audit --trained-layout": lambda t: ["audit", "--trained-layout", t, "--draft", draft, "--engine", "vllm",
                                             "--num-layers", "30", "--no-fingerprint"],
        "audit --target-layer-ids": lambda t: ["audit", "--target-layer-ids", t, "--trainer", "speculators",
                                               "--draft", draft, "--engine", "vllm", "--num-layers", "30"],
        "stamp --layers": lambda t: ["stamp", str(stamped), "--layers", t],
        "stamp --layer-ids": lambda t: ["stamp", str(stamped), "--convention", "vllm", "--layer-ids", t,
                                        "--num-layers", "30"],
        "capture --layers": lambda t: ["capture", "--text", str(sample_data / "texts" / "english_rivers.txt"),
                                       "--out", str(tmp_path / "cap"), "--layers", t],
        "probe --candidates": lambda t: ["probe", "--draft", draft, "--data", v1, "--candidates", t],
    }


@pytest.mark.parametrize("text", ["L3,,x", "²", "9" * 5000, ",", "L--1", "\x00"])
def test_no_option_gives_a_traceback_on_an_odd_list(sample_data, tmp_path, text, capsys):
    """Lists no parser accepts: exit 2 and one line on stderr from every option (a traceback would raise here)."""
    for name, argv in _options(sample_data, tmp_path).items():
        rc = main([*argv(text), "-q"])
        err = capsys.readouterr().err.strip()
        assert rc == 2, (name, rc, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, (name, err)
