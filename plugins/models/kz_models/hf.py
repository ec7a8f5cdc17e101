"""hf: transformers ``generate`` on a local checkpoint, batched with left padding, on CPU or GPU.

Spec: ``hf:PATH[?device=auto|cpu|cuda|cuda:N&dtype=auto|float32|bfloat16|float16&batch_size=8&threads=N
&decoder=auto|static|transformers&attention=matmul|triton]``
where PATH is a checkpoint directory (``config.json`` + safetensors/bin weights + tokenizer) or a ``FILE.gguf`` (loaded by
transformers, dequantized). ``decoder``: ``static`` decodes through a preallocated KV cache (each step a CUDA
graph on a GPU; kz_models.graphdecode), ``transformers`` through ``generate``, ``auto`` (default) the static
decoder on a GPU for the models it supports once it has matched the model's own forward, else ``generate``.
``attention``: how the static decoder's steps attend over the cache (kz_models.graphdecode.StaticDecoder). The
smollm2 backend builds one of these on the embedded model; the trainer can wrap its own in-memory model with
``HFPolicy(model, tokenizer)`` and push new weights with ``update_weights``.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from kz_models.graphdecode import ATTENTIONS, StaticDecoder, checked, decoding_attention
from kz_models.options import choice_option, int_option, split_options
from kz_models.stopping import first_stop
from kzcore import DTYPES, Chat, Completion, PolicyError, SamplingParams, model_dtype

OPTIONS = {
    "device": "auto",
    "dtype": "auto",
    "batch_size": "8",
    "threads": "",
    "decoder": "auto",
    "attention": "matmul",
}
DECODERS = ("auto", "static", "transformers")
CONTEXT_ATTRS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def load_hf_policy(arg: str) -> HFPolicy:
    """The ``hf`` factory: ``arg`` is ``PATH[?options]``."""
    path, options = split_options("hf", arg, OPTIONS)
    if not path:
        raise PolicyError("hf needs a checkpoint: hf:/path/to/model_dir or hf:/path/to/model.gguf")
    set_cpu_threads("hf", options)
    return HFPolicy.from_path(
        path,
        device=options["device"],
        dtype=choice_option("hf", options, "dtype", DTYPES),
        batch_size=int_option("hf", options, "batch_size"),
        name=f"hf:{arg}",
        decoder=choice_option("hf", options, "decoder", DECODERS),
        attention=choice_option("hf", options, "attention", ATTENTIONS),
    )


def set_cpu_threads(backend: str, options: dict[str, str]) -> None:
    """``threads=N``: torch's CPU thread count for this process. On a CPU shared with other busy processes
    (evaluator workers) fewer threads than cores is much faster: oversubscribed threads wait on each other."""
    if options["threads"]:
        import torch

        torch.set_num_threads(int_option(backend, options, "threads"))


def one_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (library errors can run to pages)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()[:300]
    return type(exc).__name__


def resolve_checkpoint(path: str | Path) -> tuple[Path, str | None]:
    """(directory to load from, GGUF file name inside it or None); PolicyError when there is no model."""
    p = Path(path).expanduser()
    if not p.exists():
        raise PolicyError(f"hf: model path {p} does not exist")
    if p.is_file():
        if p.suffix != ".gguf":
            raise PolicyError(f"hf: {p} is a file but not a .gguf; give a checkpoint directory or a FILE.gguf")
        return p.parent, p.name
    if not (p / "config.json").is_file():
        ggufs = sorted(p.glob("*.gguf"))
        hint = f" (it holds {ggufs[0].name}: use hf:{ggufs[0]})" if ggufs else ""
        raise PolicyError(f"hf: {p} is not a transformers checkpoint (no config.json){hint}")
    return p, None


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PolicyError(f"hf: device={device} asked for, but torch sees no CUDA GPU here")
    if device != "cpu" and not device.startswith("cuda"):
        raise PolicyError(f"hf: option device={device!r} must be auto, cpu, cuda or cuda:N")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """The dtype the model is loaded in: kzcore's one rule for every loader (fp32 on a CPU unless asked)."""
    return model_dtype(device, dtype)


def context_length(config: Any) -> int | None:
    """The model's maximum number of positions, or None when its config does not say."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for attr in CONTEXT_ATTRS:
        value = getattr(text_config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class SampledLogprobs:
    """A logits processor that records, per step, the log-probability of the token that was then chosen.

    Placed first among the custom processors, it sees the model's logits before temperature and top-p (the
    log-probabilities vLLM reports by default). It keeps one step of log-softmax in memory: the token a step
    chose is only known at the next call (it is the last column of ``input_ids``), or after ``generate``."""

    def __init__(self) -> None:
        self.previous = None
        self.steps: list[Any] = []

    def __call__(self, input_ids, scores):
        import torch

        if self.previous is not None:
            self.steps.append(self.previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, generated):
        """(batch, steps) log-probabilities of ``generated`` (the new tokens only)."""
        import torch

        if self.previous is None:
            return torch.zeros(generated.shape, dtype=torch.float32)
        last = generated[:, -1:].to(self.previous.device)
        steps = [*self.steps, self.previous.gather(1, last).squeeze(1)]
        return torch.stack(steps, dim=1).cpu()


class HFPolicy:
    """A Policy over a transformers causal LM and its tokenizer."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "hf",
        batch_size: int = 8,
        decoder: str = "auto",
        attention: str = "matmul",
    ):
        if batch_size < 1:
            raise PolicyError(f"{name}: batch_size must be >= 1")
        if decoder not in DECODERS:
            raise PolicyError(f"{name}: decoder must be one of {', '.join(DECODERS)}, not {decoder!r}")
        if attention not in ATTENTIONS:
            raise PolicyError(f"{name}: attention must be one of {', '.join(ATTENTIONS)}, not {attention!r}")
        self.name = name
        self.decoder = decoder
        self.attention = attention
        self._static: bool | None = None  # decided at the first batch (decoder=auto checks the model then)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token is None:
                raise PolicyError(f"{name}: the tokenizer has neither a pad nor an eos token")
            tokenizer.pad_token = tokenizer.eos_token
        self.eos_ids = self._eos_ids()
        self.context = context_length(model.config)
        # The directory of an ordinary checkpoint this policy was loaded from (what the trainer fine-tunes);
        # None for an in-memory model or a GGUF file (transformers' Trainer refuses a model loaded from GGUF).
        self.checkpoint: Path | None = None

    @classmethod
    def from_path(
        cls,
        path: str | Path,
        *,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 8,
        name: str = "",
        decoder: str = "auto",
        attention: str = "matmul",
    ) -> HFPolicy:
        directory, gguf_file = resolve_checkpoint(path)
        device = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, device)
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError:
            raise PolicyError("hf needs transformers: pip install transformers") from None
        extra = {"gguf_file": gguf_file} if gguf_file else {}
        try:
            tokenizer = AutoTokenizer.from_pretrained(directory, **extra)
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype, **extra)
        except Exception as exc:  # transformers raises many types; the user needs one line naming the path
            raise PolicyError(f"hf: cannot load {path}: {one_line(exc)}") from exc
        policy = cls(
            model.to(device),
            tokenizer,
            name=name or f"hf:{path}",
            batch_size=batch_size,
            decoder=decoder,
            attention=attention,
        )
        policy.checkpoint = None if gguf_file else directory
        return policy

    # -- the Policy protocol ------------------------------------------------------------------------------

    def generate(self, prompts: list[Chat], params: SamplingParams) -> list[list[Completion]]:
        encoded = [self.encode(chat, index) for index, chat in enumerate(prompts)]
        # Every (prompt, sample) is one row; rows of similar length share a batch so padding stays small.
        rows = sorted(((i, s) for i in range(len(prompts)) for s in range(params.n)), key=lambda r: len(encoded[r[0]]))
        results: list[list[Completion | None]] = [[None] * params.n for _ in prompts]
        with self._seeded(params.seed):
            for start in range(0, len(rows), self.batch_size):
                chunk = rows[start : start + self.batch_size]
                completions = self._generate_batch([encoded[i] for i, _ in chunk], params)
                for (i, s), completion in zip(chunk, completions):
                    results[i][s] = attrs.evolve(completion, prompt_index=i, sample_index=s)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        import torch

        self.model = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # -- weight sync (the trainer's path; same name as the vllm backend's) ------------------------------

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Copy ``(name, tensor)`` pairs into the model's parameters/buffers (names as in ``state_dict``)."""
        import torch

        state = dict(named_tensors)
        unknown = sorted(set(state) - set(self.model.state_dict()))
        if unknown:
            raise PolicyError(
                f"{self.name}: update_weights got names the model does not have: {', '.join(unknown[:5])}"
            )
        with torch.no_grad():
            self.model.load_state_dict(state, strict=False)

    # -- pieces -------------------------------------------------------------------------------------------

    def encode(self, chat: Chat, index: int = 0) -> list[int]:
        """Token ids of one chat prompt, ready for the assistant's reply; PolicyError when it cannot fit."""
        if not chat or not all(isinstance(m, dict) and "role" in m and "content" in m for m in chat):
            raise PolicyError(f"{self.name}: prompt {index} is not a chat (a list of {{'role', 'content'}} messages)")
        tok = self.tokenizer
        try:
            if tok.chat_template:
                text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
                ids = tok(text, add_special_tokens=False)["input_ids"]
            else:  # a base model: a plain transcript, the tokenizer's own special tokens (BOS) added
                text = "".join(f"{m['role']}: {m['content']}\n" for m in chat) + "assistant:"
                ids = tok(text)["input_ids"]
        except Exception as exc:  # a chat template may reject a role order (raise_exception in jinja)
            raise PolicyError(f"{self.name}: prompt {index} could not be formatted: {one_line(exc)}") from exc
        if self.context is not None and len(ids) >= self.context:
            raise PolicyError(
                f"{self.name}: prompt {index} is {len(ids)} tokens; the model's context is {self.context} tokens"
            )
        return ids

    def _eos_ids(self) -> frozenset[int]:
        ids = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
        if self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        return frozenset(ids)

    @property
    def device(self):
        return next(self.model.parameters()).device

    @contextlib.contextmanager
    def _seeded(self, seed: int | None) -> Iterator[None]:
        """Seed torch for this call only: the caller's global RNG state is restored afterwards."""
        import torch

        if seed is None:
            yield
            return
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield

    def _generate_batch(self, id_lists: Sequence[list[int]], params: SamplingParams) -> list[Completion]:
        import torch
        from transformers import LogitsProcessorList

        pad = self.tokenizer.pad_token_id
        width = max(len(ids) for ids in id_lists)
        input_ids = torch.full((len(id_lists), width), pad, dtype=torch.long)
        attention = torch.zeros((len(id_lists), width), dtype=torch.long)
        for row, ids in enumerate(id_lists):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        max_new = params.max_new_tokens
        if self.context is not None:  # the prompt fits (encode checked); the reply is cut at the context's end
            max_new = min(max_new, self.context - width)
        sampling: dict[str, Any] = {"do_sample": False}
        if params.temperature > 0:
            sampling = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0}
        stopping: dict[str, Any] = {}
        if params.stop:  # lets generate stop a row early; the text is cut exactly below in any case
            stopping = {"stop_strings": [s for s in params.stop if s], "tokenizer": self.tokenizer}
        if self._uses_static_decoder():
            return self._generate_static(input_ids, attention, max_new, params)
        recorder = SampledLogprobs()
        with torch.inference_mode(), decoding_attention():
            out = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                max_new_tokens=max_new,
                pad_token_id=pad,
                eos_token_id=sorted(self.eos_ids) or None,
                logits_processor=LogitsProcessorList([recorder]),
                **sampling,
                **stopping,
            )
        generated = out[:, width:].cpu()
        logprobs = recorder.finish(generated)
        return [self._completion(generated[r].tolist(), logprobs[r].tolist(), params) for r in range(len(id_lists))]

    def _uses_static_decoder(self) -> bool:
        """decoder=static: always (PolicyError for a model it cannot decode); transformers: never; auto: on a
        CUDA device, when the model is supported and the decoder matched its forward (checked once)."""
        if self._static is None:
            if self.decoder == "static":
                reason = checked(self.model, announce=False)
                if reason:
                    raise PolicyError(f"{self.name}: decoder=static: {reason}")
            self._static = self.decoder == "static" or (
                self.decoder == "auto" and self.device.type == "cuda" and checked(self.model) is None
            )
        return self._static

    def _generate_static(self, input_ids, attention, max_new: int, params: SamplingParams) -> list[Completion]:
        try:
            decoder = StaticDecoder(self.model, self.attention)
        except ValueError as exc:
            raise PolicyError(f"{self.name}: {exc}") from None
        new, logprobs = decoder.generate(
            input_ids.to(self.device),
            attention.to(self.device),
            max_new,
            temperature=params.temperature,
            top_p=params.top_p if params.temperature > 0 else 1.0,
            eos_ids=sorted(self.eos_ids),
            pad_id=self.tokenizer.pad_token_id,
            logprobs=True,
        )
        new, logprobs = new.cpu(), logprobs.cpu()
        return [self._completion(new[r].tolist(), logprobs[r].tolist(), params) for r in range(len(new))]

    def _completion(self, tokens: list[int], logprobs: list[float], params: SamplingParams) -> Completion:
        """Cut one generated row at its first EOS (kept in token_ids) or stop string (cut from the text; the
        tokens up to the one that completed it are kept)."""
        reason = "length"
        for k, token in enumerate(tokens):
            if token in self.eos_ids:
                tokens, reason = tokens[: k + 1], "stop"
                break
        text = self._decode(tokens)
        hit = first_stop(text, params.stop)
        if hit is not None:
            text, reason = text[: hit[0]], "stop"
            tokens = tokens[: self._tokens_through(tokens, hit[1])]
        return Completion(
            text=text, token_ids=tuple(tokens), logprobs=tuple(logprobs[: len(tokens)]), finish_reason=reason
        )

    def _decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def _tokens_through(self, tokens: list[int], stop: str) -> int:
        """The fewest leading tokens whose decoded text contains ``stop`` (binary search: decoding is
        prefix-monotone for the tokenizers we meet)."""
        lo, hi = 1, len(tokens)
        while lo < hi:
            mid = (lo + hi) // 2
            if stop in self._decode(tokens[:mid]):
                hi = mid
            else:
                lo = mid + 1
        return hi
