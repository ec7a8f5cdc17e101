"""A scripted policy plugin for tests: answers the built-in ReLU problem with its reference solution in a
fenced block (after some reasoning text) and every other problem with prose; counts its calls."""

from kz_suites import BUILTIN_SUITE
from kzcore import hookimpl
from kzcore.policy import Completion

SOLUTION = (BUILTIN_SUITE / "solutions/triton/level1/1_ReLU.py").read_text()
CALLS = []


class ScriptedPolicy:
    name = "scripted"

    def generate(self, prompts, params):
        CALLS.append(len(prompts))
        out = []
        for i, chat in enumerate(prompts):
            user = chat[-1]["content"]
            text = f"<think>use a kernel</think>\n```python\n{SOLUTION}```" if "torch.relu" in user else "I cannot."
            out.append([Completion(text=text, prompt_index=i, sample_index=s) for s in range(params.n)])
        return out

    def close(self):
        pass


@hookimpl
def kz_register_policies(register):
    register("scripted", lambda arg: ScriptedPolicy())


PROMPTS = []


class RecordingPolicy(ScriptedPolicy):
    """The scripted policy that also keeps every prompt it was asked (``PROMPTS``), for prompt-identity tests."""

    name = "recording"

    def generate(self, prompts, params):
        PROMPTS.extend(prompts)
        return super().generate(prompts, params)


@hookimpl(specname="kz_register_policies")
def register_recording(register):
    register("recording", lambda arg: RecordingPolicy())
