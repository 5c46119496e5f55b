"""Trained weights into the generation engines after every optimizer step: one typed interface
(``base.WeightSync``: stage, apply, probe_engines) and one implementation per way the weights
travel: ``module_share`` (HF: the live module or a copy), ``disk`` (vLLM: bf16 safetensors shards
in a fresh folder per version, reloaded in place), ``nccl`` (vLLM GPU servers: vLLM's NCCL weight
transfer). See ``docs/inference.md``, "Weight sync after every optimizer step".
"""
