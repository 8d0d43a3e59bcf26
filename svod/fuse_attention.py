"""`svod.fuse_attention`: the attention-fusion plan pass, under the name the README and
docs use. It lives in `svod/lower/attention.py` and runs inside the lowering
(`svod.lower.PLAN_PASSES`), so every plan is already fused; calling it on such a plan
returns the plan itself."""

from svod.lower.attention import fuse_attention, softmax_input

__all__ = ["fuse_attention", "softmax_input"]
