"""Training: cold-start distillation and SFT, CA-GRPO for the Coder, frontier-reward GRPO for the Proposer, and the alternating schedule."""
