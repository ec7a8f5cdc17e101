"""`kz serve`: a policy behind an OpenAI-compatible chat-completions endpoint (`kzcore.serve`)."""

from __future__ import annotations

from kzcore.cli.options import DEFAULT_POLICY, ranged
from kzcore.types import Command


def _cmd_serve(args) -> int:
    import os

    from kzcore.serve import serve

    serve(args.policy, args.host, args.port, model_name=args.model_name, api_key=os.environ.get("KZ_SERVE_API_KEY"))
    return 0


def _configure(parser) -> None:
    parser.description = (
        "Serve a policy at http://HOST:PORT/v1/chat/completions, so OpenAI-compatible clients "
        "(and kz's own openai: policy) can sample from it. Requests must carry $KZ_SERVE_API_KEY as a bearer "
        "token when it is set."
    )
    parser.add_argument("--policy", default=DEFAULT_POLICY, metavar="NAME[:ARG]", help="the policy to serve")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=ranged(int, 0, 65535), default=8000, help="port to listen on")
    parser.add_argument("--model-name", default=None, help="model id clients see (default: the policy spec)")


def commands() -> list[Command]:
    """`kz serve`, as kzcore.builtins.commands registers it."""
    return [
        Command(
            name="serve", run=_cmd_serve, help="serve a policy as an OpenAI-compatible chat-completions endpoint",
            configure=_configure,
        )
    ]  # fmt: skip
