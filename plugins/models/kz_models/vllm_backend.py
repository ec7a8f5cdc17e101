"""vllm: vLLM's offline engine on a local checkpoint (GPU only), or a running vLLM server, with the weight sync
the trainer needs. vLLM is imported only when such a policy is built; nothing here has run on a machine with
vLLM (see docs/policies.md): it is written against vLLM's documented ``LLM`` API (``LLM.chat``,
``SamplingParams``, ``LLM.apply_model``, ``LLM.reset_prefix_cache``) and TRL's ``VLLMClient``.

  vllm:PATH[?tensor_parallel_size=1&gpu_memory_utilization=0.9&dtype=auto&max_model_len=&seed=0&enforce_eager=0]
  vllm:http://HOST:PORT     generation through the ``openai`` policy at HOST:PORT/v1; update_weights through
                            TRL's VLLMClient (start the server as TRL's vLLM integration guide says)
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kz_models.hf import one_line
from kz_models.options import choice_option, int_option, split_options
from kzcore import Chat, Completion, PolicyError, SamplingParams, load_policy

OPTIONS = {
    "tensor_parallel_size": "1",
    "gpu_memory_utilization": "0.9",
    "dtype": "auto",
    "max_model_len": "",
    "seed": "0",
    "enforce_eager": "0",
}
SERVER_OPTIONS = {"group_port": "51216", "timeout": "240"}
FINISH_REASONS = {"stop": "stop", "length": "length"}  # vLLM's "abort" (and anything else) is an error


def load_vllm_policy(arg: str) -> VLLMPolicy | VLLMServerPolicy:
    target, _, _ = arg.partition("?")
    if target.startswith(("http://", "https://")):
        url, options = split_options("vllm", arg, SERVER_OPTIONS)
        return VLLMServerPolicy(
            url.rstrip("/"),
            group_port=int_option("vllm", options, "group_port"),
            timeout=float(int_option("vllm", options, "timeout", minimum=0)),
        )
    vllm = import_vllm()
    path, options = split_options("vllm", arg, OPTIONS)
    if not path:
        raise PolicyError("vllm needs a checkpoint directory (vllm:/path/to/model) or a server (vllm:http://host:port)")
    if not Path(path).expanduser().exists():
        raise PolicyError(f"vllm: model path {path} does not exist")
    return VLLMPolicy(vllm, str(Path(path).expanduser()), engine_kwargs(options), name=f"vllm:{arg}")


def import_vllm():
    try:
        import vllm
    except ImportError as exc:
        raise PolicyError(
            f"vllm is not installed ({one_line(exc)}); it needs a CUDA GPU: pip install vllm, "
            "or use hf:PATH on this machine"
        ) from None
    return vllm


def engine_kwargs(options: dict[str, str]) -> dict[str, Any]:
    """Our options → ``vllm.LLM(...)`` keyword arguments."""
    try:
        memory = float(options["gpu_memory_utilization"])
    except ValueError:
        raise PolicyError(
            f"vllm: gpu_memory_utilization={options['gpu_memory_utilization']!r} is not a number"
        ) from None
    if not 0.0 < memory <= 1.0:
        raise PolicyError(f"vllm: gpu_memory_utilization={memory} must be in (0, 1]")
    kwargs: dict[str, Any] = {
        "tensor_parallel_size": int_option("vllm", options, "tensor_parallel_size"),
        "gpu_memory_utilization": memory,
        "dtype": choice_option("vllm", options, "dtype", ("auto", "float32", "bfloat16", "float16")),
        "seed": int_option("vllm", options, "seed", minimum=0),
        "enforce_eager": choice_option("vllm", options, "enforce_eager", ("0", "1")) == "1",
    }
    if options["max_model_len"]:
        kwargs["max_model_len"] = int_option("vllm", options, "max_model_len")
    return kwargs


def sampling_kwargs(params: SamplingParams, prompt_index: int = 0) -> dict[str, Any]:
    """Our SamplingParams → ``vllm.SamplingParams(...)`` keyword arguments for one prompt.

    The seed is offset by the prompt's index so that two identical prompts in one call do not get identical
    samples; ``logprobs=0`` asks for the sampled token's log-probability only."""
    kwargs: dict[str, Any] = {
        "n": params.n,
        "temperature": params.temperature,
        "top_p": params.top_p if params.temperature > 0 else 1.0,
        "max_tokens": params.max_new_tokens,
        "logprobs": 0,
    }
    if params.seed is not None:
        kwargs["seed"] = params.seed + prompt_index
    if params.stop:
        kwargs["stop"] = list(params.stop)
    return kwargs


def completions_from_output(request_output: Any, prompt_index: int) -> list[Completion]:
    """One ``vllm.RequestOutput`` → our Completions, in sample order. vLLM already cut the text before the
    stop string (``include_stop_str_in_output`` is False by default)."""
    completions = []
    for output in sorted(request_output.outputs, key=lambda o: o.index):
        token_ids = tuple(int(t) for t in output.token_ids)
        logprobs = None
        if output.logprobs is not None:  # one {token_id: Logprob} per generated token
            logprobs = tuple(float(step[t].logprob) for step, t in zip(output.logprobs, token_ids))
        completions.append(
            Completion(
                text=output.text,
                prompt_index=prompt_index,
                sample_index=int(output.index),
                token_ids=token_ids,
                logprobs=logprobs,
                finish_reason=FINISH_REASONS.get(output.finish_reason, "error"),
            )
        )
    return completions


class LoadWeights:
    """Sent to each vLLM worker by ``LLM.apply_model``: loads ``(name, tensor)`` pairs through the model's
    own ``load_weights`` (which maps HF names onto vLLM's fused layers). Module-level, so it pickles."""

    def __init__(self, weights: Sequence[tuple[str, Any]]):
        self.weights = list(weights)

    def __call__(self, model: Any) -> int:
        model.load_weights(self.weights)
        return len(self.weights)


class VLLMPolicy:
    """A Policy over ``vllm.LLM`` (offline engine)."""

    def __init__(self, vllm: Any, model: str, kwargs: dict[str, Any], *, name: str):
        self.name = name
        self._sampling_params = vllm.SamplingParams
        try:
            self.llm = vllm.LLM(model=model, **kwargs)
        except Exception as exc:  # engine start-up fails in many ways (no GPU, OOM, unknown architecture)
            raise PolicyError(f"{name}: vLLM could not start on {model}: {one_line(exc)}") from exc

    def generate(self, prompts: list[Chat], params: SamplingParams) -> list[list[Completion]]:
        per_prompt = [self._sampling_params(**sampling_kwargs(params, i)) for i in range(len(prompts))]
        try:
            outputs = self.llm.chat(prompts, sampling_params=per_prompt, use_tqdm=False, add_generation_prompt=True)
        except (ValueError, TypeError) as exc:  # vLLM reports a prompt over max_model_len as a ValueError
            raise PolicyError(f"{self.name}: {one_line(exc)}") from exc
        return [completions_from_output(output, i) for i, output in enumerate(outputs)]

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Load new weights (HF parameter names) into the running engine, then drop the prefix cache, whose
        KV entries were computed with the old weights."""
        weights = list(named_tensors)
        model = in_process_model(self.llm)
        if model is not None:  # the engine runs in this process (TRL's colocate mode): no copy
            model.load_weights(weights)
        else:  # engine workers in other processes: vLLM serialises the callable and its tensors to each
            self.llm.apply_model(LoadWeights(weights))
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        import torch

        self.llm = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def in_process_model(llm: Any) -> Any:
    """The model object when vLLM runs it in this process (the path TRL's colocate mode uses), else None."""
    try:
        return llm.llm_engine.model_executor.driver_worker.model_runner.model
    except AttributeError:
        return None


class VLLMServerPolicy:
    """A running vLLM server: completions through the ``openai`` policy (its OpenAI-compatible API), new
    weights through TRL's ``VLLMClient`` (NCCL from this process to the server's workers)."""

    def __init__(self, url: str, *, group_port: int = 51216, timeout: float = 240.0):
        self.name = f"vllm:{url}"
        self.url = url
        self.group_port = group_port
        self.timeout = timeout
        self.client = None
        self.chat_policy = load_policy(f"openai:{url}/v1")

    def generate(self, prompts: list[Chat], params: SamplingParams) -> list[list[Completion]]:
        return self.chat_policy.generate(prompts, params)

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        client = self._client()
        for name, tensor in named_tensors:
            client.update_named_param(name, tensor)
        client.reset_prefix_cache()

    def _client(self):
        if self.client is None:
            try:
                from trl.generation.vllm_client import VLLMClient
            except ImportError:
                try:
                    from trl.extras.vllm_client import VLLMClient  # TRL < 1.0
                except ImportError:
                    raise PolicyError(f"{self.name}: weight sync to a vLLM server needs trl: pip install trl") from None
            try:
                self.client = VLLMClient(base_url=self.url, group_port=self.group_port, connection_timeout=self.timeout)
                self.client.init_communicator()
            except Exception as exc:
                raise PolicyError(f"{self.name}: cannot open the weight-sync channel: {one_line(exc)}") from exc
        return self.client

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close_communicator()
            finally:
                self.client = None
        self.chat_policy.close()
