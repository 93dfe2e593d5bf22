"""``hsf export-model OUT [--model M]``: write a model as a plain Hugging Face folder (``config.json``,
``model.safetensors``, tokenizer files), by default the packaged SmolLM2-135M-Instruct, for users who capture
hidden states with plain transformers (``AutoModelForCausalLM.from_pretrained(OUT)``) and check the captures with
``hsf fingerprint capture.pt --model OUT``. The folder must not exist yet (nothing is overwritten).
"""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("out", metavar="OUT", help="the folder to create (must not exist)")
    p.add_argument("--model", default="default", metavar="PATH",
                   help="the model to export: 'default' (packaged SmolLM2), a .gguf or an HF folder")


def run(args) -> int:
    import os

    from forensics.models.target import export_model

    folder = export_model(args.model, args.out)
    files = sorted(os.listdir(folder))
    if args.json:
        from forensics.cli._common import print_json

        print_json({"folder": os.path.abspath(folder), "files": files})
    else:
        args.console.text(f"wrote {folder}: {', '.join(files)}")
        args.console.text(f"capture with AutoModelForCausalLM.from_pretrained({folder!r}); check with "
                          f"hsf fingerprint capture.pt --model {folder}")
    return 0
