"""The from-zero bootstrap, apart from the loop: teachers, distillation, tokenizer and models, SFT and its stopping rule.

What reinforcement learning starts from, built once per plan and cached (from_zero.py). It may use
the stages' code (the synthesizer, the evaluator, the validator) as a library; no stage imports it,
and nothing here runs while the loop runs.
"""
