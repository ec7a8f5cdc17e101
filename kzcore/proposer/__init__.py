"""The Proposer: torch API sets → KernelBench-format problem modules → gates → task pool (docs/proposer.md).

catalog (the API catalog data file), sampler (API sets weighted by the pool's history), prompt (chat messages),
gates (AST gate, dedup key, verdict types), pool (TaskRecord JSONL, stats), propose (one Proposer pass)."""

from kzcore.proposer.catalog import Catalog, CatalogError, TorchApi, load_catalog
from kzcore.proposer.gates import GATE_ORDER, AstGateConfig, GateResult, check_ast, dedup_key, runtime_gates
from kzcore.proposer.pool import PoolError, TaskRecord, append_records, read_pool, record_pass_rates, stats
from kzcore.proposer.propose import ProposerError, ProposeSummary, extract_module, propose
from kzcore.proposer.sampler import SamplerConfig, api_weights, sample_api_sets

__all__ = [
    "GATE_ORDER",
    "AstGateConfig",
    "Catalog",
    "CatalogError",
    "GateResult",
    "PoolError",
    "ProposeSummary",
    "ProposerError",
    "SamplerConfig",
    "TaskRecord",
    "TorchApi",
    "api_weights",
    "append_records",
    "check_ast",
    "dedup_key",
    "extract_module",
    "load_catalog",
    "propose",
    "read_pool",
    "record_pass_rates",
    "runtime_gates",
    "sample_api_sets",
    "stats",
]
