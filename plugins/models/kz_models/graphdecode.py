"""Decoding with a preallocated KV cache, each step replayed as one CUDA graph, for Llama-family models
(transformers' ``LlamaForCausalLM`` and the models built like it: Qwen2, Qwen3, Mistral without a sliding window).

Why: transformers' ``generate`` is host-bound on small models. On an H200, SmolLM2-135M spends ~30 ms of Python per
decoding step while the GPU idles; the same step replayed as a CUDA graph is a few hundred kernel launches, about a
millisecond. Generation was three quarters of the GPU time of a GRPO step (experiments/learning_signal/README.md).

The decoder reuses the model's own modules (embedding, norms, projections, MLP, rotary embedding, LM head) and
replaces only attention, which reads a cache allocated once per call: it follows the weights as they train, and a
new graph is captured for every call (shapes and weights may change between calls). ``verify`` checks it against
the model's own forward before first use; whatever it does not cover (beam search, repetition penalty, min_p, a
sliding window, dynamic RoPE, ...) is left to ``generate``. On a CPU the same step runs eagerly (the tests' path).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
# generate() settings that change what is decoded, at the value that leaves it unchanged: any other value sends
# the call to transformers' generate (the decoder implements temperature, top-k, top-p, EOS and padding only)
NEUTRAL = {
    "num_beams": 1,
    "num_return_sequences": 1,
    "repetition_penalty": 1.0,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": None,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "stop_strings": None,
    "output_scores": False,
    "output_logits": False,
    "return_dict_in_generate": False,
}
# transformers' own defaults for a setting neither the call nor the model's generation_config sets
GLOBAL_DEFAULTS = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}


def unsupported(model: Any) -> str | None:
    """Why ``model`` cannot be decoded here (one line), or None when it can."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in MODEL_TYPES:
        return f"model type {kind!r} is not one of {', '.join(MODEL_TYPES)}"
    base = getattr(model, "model", None)
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(base, name):
            return f"the model has no model.{name}"
    if not hasattr(model, "lm_head"):
        return "the model has no lm_head"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return "a sliding attention window"
    rope = str(getattr(base.rotary_emb, "rope_type", "default"))
    if "dynamic" in rope or "longrope" in rope:
        return f"RoPE type {rope!r} changes with the sequence length"
    attn = base.layers[0].self_attn
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling"):
        if not hasattr(attn, name):
            return f"its attention has no {name}"
    return None


@contextlib.contextmanager
def decoding_attention() -> Iterator[None]:
    """Scaled-dot-product attention by any of torch's backends but cuDNN's, for the duration of a decode.

    cuDNN's attention (which torch prefers on Hopper GPUs in bf16) builds an execution graph for each new
    sequence length it meets. Decoding grows the KV cache by one position a step, so every step of a batch whose
    shapes were not seen before pays for new graphs: on an H200 with SmolLM2-135M (30 layers, 16 or 40 rows) a
    step of transformers' generate took ~95-105 ms with cuDNN and ~27-34 ms without. Flash and memory-efficient
    attention need no per-shape set-up. The previous backend flags are restored on exit; on a CPU, where cuDNN
    attention does not run, nothing changes."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "OVERRIDEABLE")
    with sdpa_kernel([getattr(SDPBackend, n) for n in names if hasattr(SDPBackend, n)]):
        yield


def _rotate_half(x):
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


ATTENTIONS = ("matmul", "triton")


class StaticDecoder:
    """Greedy or sampled decoding of a left-padded batch through a preallocated KV cache. ``attention``: how a
    step attends over the cache: ``matmul`` (two batched matmuls over the whole cache, masked) or ``triton``
    (kz_models.decode_attention: a split-K kernel that reads only each row's filled slots; a batch whose mask
    is not left padding falls back to ``matmul``)."""

    def __init__(self, model: Any, attention: str = "matmul"):
        reason = unsupported(model)
        if reason:
            raise ValueError(f"cannot decode this model with a static cache: {reason}")
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, not {attention!r}")
        self.model = model
        self.base = model.model
        self.layers = list(self.base.layers)
        config = model.config
        attn = self.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.n_heads = config.num_attention_heads
        self.n_kv = getattr(config, "num_key_value_heads", None) or self.n_heads
        self.groups = self.n_heads // self.n_kv
        self.scaling = attn.scaling
        if attention == "triton":
            from kz_models.decode_attention import supported

            reason = supported(self.head_dim)
            if reason:
                raise ValueError(f"attention=triton: {reason}")
        self.attention = attention
        self._kernel = False  # this batch's steps attend through the kernel (`begin` decides)

    # -- the model's pieces, attention replaced ----------------------------------------------------------

    def _qkv(self, attn, h, cos, sin):
        batch, length = h.shape[:2]
        shape = (batch, length, -1, self.head_dim)
        q = attn.q_proj(h).view(shape)
        k = attn.k_proj(h).view(shape)
        if hasattr(attn, "q_norm"):  # Qwen3 normalises each head before RoPE
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), attn.v_proj(h).view(shape).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v

    def _block_end(self, layer, x, attended):
        batch, length = x.shape[:2]
        x = x + layer.self_attn.o_proj(attended.transpose(1, 2).reshape(batch, length, -1))
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def _logits(self, x):
        return self.model.lm_head(self.base.norm(x))[:, -1].float()

    def prefill(self, ids, mask, keys, values):
        """Run the prompt (``ids``, ``mask``: [B, P], left-padded), fill cache slots [0, P); the last
        position's logits [B, V] in float32."""
        import torch
        import torch.nn.functional as F

        length = ids.shape[1]
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        x = self.base.embed_tokens(ids)
        cos, sin = self.base.rotary_emb(x, positions)
        causal = torch.ones(length, length, dtype=torch.bool, device=ids.device).tril()
        allowed = causal[None] & mask.bool()[:, None, :]
        # a padding query sees no real key: let it see itself, so no row of the softmax is empty (no NaN)
        allowed = (allowed | torch.eye(length, dtype=torch.bool, device=ids.device)[None])[:, None]
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer.self_attn, layer.input_layernorm(x), cos, sin)
            keys[i][:, :, :length] = k.to(keys[i].dtype)
            values[i][:, :, :length] = v.to(values[i].dtype)
            k, v = k.repeat_interleave(self.groups, dim=1), v.repeat_interleave(self.groups, dim=1)
            attended = F.scaled_dot_product_attention(
                q, k.to(q.dtype), v.to(q.dtype), attn_mask=allowed, scale=self.scaling
            )
            x = self._block_end(layer, x, attended)
        return self._logits(x)

    def step(self, state: _StepState) -> None:
        """One decoding step on ``state``'s buffers (what a CUDA graph captures): embed ``token`` at
        ``position``, write K/V at cache slot ``slot``, attend over every valid slot, logits into
        ``state.logits``; then advance ``position`` and ``slot``."""
        import torch

        batch = state.token.shape[0]
        x = self.base.embed_tokens(state.token[:, None])
        cos, sin = self.base.rotary_emb(x, state.position[:, None])
        state.valid.index_fill_(1, state.slot, True)
        visible = state.valid[:, None, None, :]
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer.self_attn, layer.input_layernorm(x), cos, sin)
            keys, values = state.keys[i], state.values[i]
            keys.index_copy_(2, state.slot, k.to(keys.dtype))
            values.index_copy_(2, state.slot, v.to(values.dtype))
            if self._kernel:
                from kz_models.decode_attention import attend

                attended = attend(q, keys, values, state.first, state.slot + 1, self.scaling).to(x.dtype)
            else:
                # grouped-query attention without copying the cache: each KV head serves `groups` query heads
                qg = q.reshape(batch, self.n_kv, self.groups, self.head_dim).to(keys.dtype)
                scores = torch.matmul(qg, keys.transpose(-1, -2)).float() * self.scaling
                probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1).to(values.dtype)
                attended = torch.matmul(probs, values).reshape(batch, self.n_heads, 1, self.head_dim).to(x.dtype)
            x = self._block_end(layer, x, attended)
        state.logits.copy_(self._logits(x))
        state.position.add_(1)
        state.slot.add_(1)

    # -- decoding ------------------------------------------------------------------------------------------

    def generate(
        self,
        ids,
        mask,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        eos_ids: Sequence[int] = (),
        pad_id: int = 0,
        logprobs: bool = False,
        graph: bool | None = None,
        check_every: int = 16,
    ):
        """New tokens [B, T] (T ≤ ``max_new_tokens``; ``pad_id`` after a row's first EOS, which is kept) and,
        with ``logprobs``, each chosen token's log-probability under the model's raw logits [B, T] (else None).
        ``temperature`` 0 is greedy; otherwise temperature, then top-k (0: off), then top-p, as transformers
        applies them. ``graph``: replay each step as a CUDA graph (default: on a CUDA device)."""
        import torch

        device = ids.device
        graph = device.type == "cuda" if graph is None else graph
        batch, prompt = ids.shape
        with torch.no_grad():
            state, step, logits = self.begin(ids, mask, max_new_tokens, graph)
            eos = torch.tensor(sorted(set(eos_ids)) or [-1], device=device)
            out = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device)
            chosen_lp = torch.zeros((batch, max_new_tokens), dtype=torch.float32, device=device) if logprobs else None
            done = torch.zeros(batch, dtype=torch.bool, device=device)
            steps = 0
            for t in range(max_new_tokens):
                if t:
                    step()
                    logits = state.logits
                token = sample(logits, temperature, top_k, top_p)
                if chosen_lp is not None:
                    chosen_lp[:, t] = torch.log_softmax(logits, dim=-1).gather(1, token[:, None])[:, 0]
                token = torch.where(done, torch.full_like(token, pad_id), token)
                out[:, t] = token
                done |= torch.isin(token, eos)
                state.token.copy_(token)
                steps = t + 1
                if steps % check_every == 0 and bool(done.all()):
                    break
            return out[:, :steps].clone(), (chosen_lp[:, :steps].clone() if chosen_lp is not None else None)

    def begin(self, ids, mask, max_new_tokens: int, graph: bool):
        """(buffers for the prompt plus ``max_new_tokens``, the step function on them — a CUDA graph's replay
        with ``graph`` —, the prompt's last logits) with the prompt run and every buffer at its start."""
        state = _StepState.allocate(self, ids.shape[0], ids.shape[1] + max_new_tokens, ids.device)
        self._kernel = self.attention == "triton" and left_padded(mask)
        step = self._captured(state) if graph else functools.partial(self.step, state)
        with decoding_attention():
            logits = self.prefill(ids, mask, state.keys, state.values)
        state.start(mask, ids.shape[1])
        return state, step, logits

    def _captured(self, state: _StepState) -> Callable[[], None]:
        """``step`` captured as a CUDA graph on ``state``'s buffers (run once first, as capture requires;
        ``state.start`` resets what that run changed)."""
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.step(state)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self.step(state)
        return g.replay


class _StepState:
    """The buffers a decoding step reads and writes (fixed addresses, so a CUDA graph can replay it)."""

    def __init__(self, keys, values, token, position, slot, valid, logits, first):
        self.keys, self.values = keys, values
        self.token, self.position, self.slot, self.valid, self.logits = token, position, slot, valid, logits
        self.first = first  # each row's first valid slot (left padding before it)

    @classmethod
    def allocate(cls, decoder: StaticDecoder, batch: int, length: int, device) -> _StepState:
        import torch

        dtype = decoder.model.lm_head.weight.dtype
        shape = (batch, decoder.n_kv, length, decoder.head_dim)
        keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in decoder.layers]
        values = [torch.zeros(shape, dtype=dtype, device=device) for _ in decoder.layers]
        vocab = decoder.model.lm_head.weight.shape[0]
        return cls(
            keys,
            values,
            token=torch.zeros(batch, dtype=torch.long, device=device),
            position=torch.zeros(batch, dtype=torch.long, device=device),
            slot=torch.zeros(1, dtype=torch.long, device=device),
            valid=torch.zeros((batch, length), dtype=torch.bool, device=device),
            logits=torch.zeros((batch, vocab), dtype=torch.float32, device=device),
            first=torch.zeros(batch, dtype=torch.long, device=device),
        )

    def start(self, mask, prompt: int) -> None:
        """After the prompt: the next token goes to slot ``prompt`` at each row's next position; only the
        prompt's real tokens are valid keys."""
        self.valid.zero_()
        self.valid[:, :prompt] = mask.bool()
        self.position.copy_(mask.long().sum(-1))
        self.first.copy_(prompt - mask.long().sum(-1))
        self.slot.fill_(prompt)


def left_padded(mask) -> bool:
    """Whether every row of ``mask`` [B, P] is zeros then ones (padding only before the prompt)."""
    import torch

    first = mask.shape[1] - mask.long().sum(-1)
    return bool(torch.equal(mask.bool(), torch.arange(mask.shape[1], device=mask.device)[None] >= first[:, None]))


def sample(logits, temperature: float, top_k: int, top_p: float):
    """One token per row of float ``logits`` [B, V]: argmax at temperature 0, else temperature, then top-k
    (0: off), then top-p (nucleus: the smallest set of most likely tokens whose mass reaches ``top_p``; at least
    one token is kept)."""
    import torch

    if temperature <= 0:
        return logits.argmax(dim=-1)
    scores = logits / temperature
    if top_k and top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(scores, dim=-1)  # ascending
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1.0 - top_p
        drop[:, -1] = False
        scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return torch.multinomial(scores.softmax(dim=-1), 1)[:, 0]


CLEAR_MARGIN = 0.05  # a position's choice is clear when its top logit beats the second by this share of the scale


def agreement(model: Any, *, steps: int = 6, seed: int = 0) -> tuple[float, float]:
    """(max |logit error| over the logits' scale, share of equal argmaxes where the model's choice is clear)
    between the decoder and the model's own forward on a small left-padded batch: the logits of every generated
    position (greedy, through a CUDA graph on a GPU), teacher-forced through ``model(...)``."""
    import torch

    device = model.lm_head.weight.device
    gen = torch.Generator().manual_seed(seed)
    vocab = model.lm_head.weight.shape[0]
    ids = torch.randint(0, vocab, (2, 12), generator=gen).to(device)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # one row left-padded
    decoder = StaticDecoder(model)
    with torch.no_grad():
        state, step, first = decoder.begin(ids, mask, steps, graph=device.type == "cuda")
        mine = [first]
        for _ in range(steps - 1):
            state.token.copy_(mine[-1].argmax(-1))
            step()
            mine.append(state.logits.clone())
        tokens = torch.stack([m.argmax(-1) for m in mine[:-1]], dim=1)
        full_ids = torch.cat([ids, tokens], dim=1)
        full_mask = torch.cat([mask, torch.ones_like(tokens)], dim=1)
        positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
        ref = model(input_ids=full_ids, attention_mask=full_mask, position_ids=positions).logits.float()[:, 11:]
    got = torch.stack(mine, dim=1)
    scale = ref.abs().amax().clamp(min=1e-6)
    # argmaxes compared where the model's choice is clear: random prompts give flat distributions, where half
    # precision flips near-ties (an H200 run saw 75 % agreement at 2.4e-2 of scale from bf16 noise alone)
    top2 = ref.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > CLEAR_MARGIN * scale
    same = got.argmax(-1) == ref.argmax(-1)
    agree = float(same[clear].float().mean()) if bool(clear.any()) else 1.0
    return float((got - ref).abs().amax() / scale), agree


# How far the decoder may stray from the model's own forward: half-precision noise passes (a forward that
# accelerate wraps in bf16 autocast for mixed-precision training, as TRL's GRPO does, differs from the decoder's
# float32 arithmetic by ~2-4e-2 of the logits' scale), a wrong decoder does not (a RoPE left out: ~1 of scale, and
# most clear argmaxes differ). The CPU tests hold float32 decoding to the same tokens as transformers' generate.
MAX_ERROR = 0.1
MIN_ARGMAX_AGREEMENT = 0.9


def verify(model: Any, *, steps: int = 6, seed: int = 0) -> str | None:
    """None when the decoder agrees with the model's own forward (``agreement``: within ``MAX_ERROR`` of the
    logits' scale and the same argmax at ≥ ``MIN_ARGMAX_AGREEMENT`` of positions), else why not."""
    error, agree = agreement(model, steps=steps, seed=seed)
    if error > MAX_ERROR or agree < MIN_ARGMAX_AGREEMENT:
        return f"the static decoder's logits differ from the model's forward (max error {error:.2e} of scale, argmax agreement {agree:.0%})"  # fmt: skip
    return None


def checked(model: Any, announce: bool = True) -> str | None:
    """``unsupported`` then ``verify`` (an exception, such as a failed graph capture, counts as a failure); with
    ``announce``, prints the reason on stderr, since the model will then be decoded by transformers instead."""
    try:
        reason = unsupported(model) or verify(model)
    except Exception as exc:  # noqa: BLE001 - the decoder is an optimisation: any failure means "not here"
        reason = (
            f"the static decoder failed its check: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        )
    if reason and announce:
        print(f"kz: decoding through transformers' generate: {reason}", file=sys.stderr)
    return reason


def _setting(config: Any, model: Any, name: str, default: Any = None) -> Any:
    """A generation setting as transformers resolves it: the call's config, else the model's, else the global
    default."""
    for source in (config, getattr(model, "generation_config", None)):
        value = getattr(source, name, None)
        if value is not None:
            return value
    return GLOBAL_DEFAULTS.get(name, default)


def fast_generate(model: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """A drop-in for ``model.generate`` as TRL calls it (``input_ids``, ``attention_mask``,
    ``generation_config``): decoded by ``StaticDecoder`` when the call asks only for what it implements (greedy,
    or sampling with temperature, top-k and top-p; EOS and padding) and the model passed ``verify``; otherwise by
    ``original``. Returns prompt + new tokens, padded after each row's EOS, as ``generate`` does."""
    verdict: list[str | None] = []

    @functools.wraps(original)
    def generate(input_ids=None, attention_mask=None, generation_config=None, **kwargs):
        import torch

        def fallback():
            return original(input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config, **kwargs)  # fmt: skip

        other = {k for k, v in kwargs.items() if v is not None and k != "disable_compile"}
        custom = [k for k, neutral in NEUTRAL.items() if _setting(generation_config, model, k, neutral) != neutral]
        max_new = _setting(generation_config, model, "max_new_tokens")
        if input_ids is None or other or custom or max_new is None:
            return fallback()
        if not verdict:
            verdict.append(checked(model))
        if verdict[0]:
            return fallback()
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        eos = _setting(generation_config, model, "eos_token_id", [])
        eos = [eos] if isinstance(eos, int) else list(eos)
        pad = _setting(generation_config, model, "pad_token_id", eos[0] if eos else 0)
        sampled = bool(_setting(generation_config, model, "do_sample"))
        try:
            new, _ = StaticDecoder(model).generate(
                input_ids,
                attention_mask,
                int(max_new),
                temperature=float(_setting(generation_config, model, "temperature")) if sampled else 0.0,
                top_k=int(_setting(generation_config, model, "top_k")),
                top_p=float(_setting(generation_config, model, "top_p")),
                eos_ids=eos,
                pad_id=pad,
            )
        except Exception as exc:  # noqa: BLE001 - any failure: say so once, decode this and later calls the slow way
            verdict[0] = (
                f"the static decoder failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
            print(f"kz: decoding through transformers' generate from now on: {verdict[0]}", file=sys.stderr)
            return fallback()
        return torch.cat([input_ids, new], dim=1)

    return generate
