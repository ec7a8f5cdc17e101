"""A tiny random Llama with a BPE tokenizer trained here, saved as an ordinary checkpoint: what trainer and
policy tests use instead of a hub model."""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def corpus() -> list[str]:
    from kz_suites import BUILTIN_SUITE as root

    return [p.read_text() for p in sorted(root.rglob("*.py"))[:30]]


def build_tiny_checkpoint(path: Path, context: int = 4096, vocab_size: int = 512, hidden: int = 32) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Metaspace()
    raw.train_from_iterator(
        corpus(), trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<eos>", "<pad>", "<bos>", "<unk>"])
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<eos>", pad_token="<pad>", bos_token="<bos>", unk_token="<unk>"
    )
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path
