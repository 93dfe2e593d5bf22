"""``hsf stamp DATASET``: write into the data what each slot is (r, convention, producer, target, L) and a compact
fingerprint of its values, so ``hsf verify`` can later prove the files still hold those layers.

Safetensors files get the stamp in their header ``__metadata__`` (the tensor bytes are copied unchanged, the
file replaced atomically); ``.pt`` / ``.ckpt`` files get it in the ``capture.json`` beside them. r per slot comes
from ``--layers``, or ``--convention`` + ``--layer-ids``, or what the data already declares (capture.json,
data_config.json). Each file is stamped whole or left unchanged; the output names every file that was not stamped
and why (a symbolic link, a file with other hard links, a read-only or immutable file, a full disk).
Exit codes: 0 every file stamped; 2 a file not stamped, unreadable input, bad arguments or a read-only filesystem.
"""

from __future__ import annotations

from forensics.cli._common import positive_int, print_json


def add_arguments(p) -> None:
    from forensics.models.conventions import SYSTEMS

    p.add_argument("dataset", metavar="DATASET", help="a capture file or a folder (searched recursively)")
    p.add_argument("--layers", metavar="R,R,...", help="r of every slot in stored order, e.g. embed,L3,L16,L28")
    p.add_argument("--convention", choices=list(SYSTEMS), metavar="NAME",
                   help=f"the numbering of --layer-ids (the system that captured the data): {', '.join(SYSTEMS)}")
    p.add_argument("--layer-ids", metavar="I,I,...", help="the ids the data was captured with, in --convention")
    p.add_argument("--producer", metavar="TEXT",
                   help="engine or trainer and its version that wrote the data, e.g. 'vllm 0.19 extract_hidden_states'")
    p.add_argument("--model-name", metavar="NAME", help="the target model the data came from")
    p.add_argument("--num-layers", type=positive_int, metavar="L", help="the target's num_hidden_layers")


def run(args) -> int:
    from forensics.analysis.stamp import stamp
    from forensics.errors import ForensicsError
    from forensics.layers import parse_id_list
    from forensics.views.stamp import stamp_text

    ids = None
    if args.layer_ids is not None:
        if args.convention is None:
            raise ForensicsError("--layer-ids needs --convention (which system's numbering the ids use)")
        ids = parse_id_list(args.layer_ids, "--layer-ids")
    res = stamp(args.dataset, layers=args.layers, convention=args.convention, layer_ids=ids, producer=args.producer,
                model=args.model_name, num_layers=args.num_layers)
    if args.json:
        print_json(res.to_dict())
    else:
        args.console.text(stamp_text(res))
    return 0 if res.ok else 2
