"""Producers: the Proposer and the Coder, and the LLM generation backends (their prompt templates are the kit's, kernelzero/kit/prompts/)."""
