"""Producers: the Proposer and the Coder, their prompts and the LLM generation backends."""
