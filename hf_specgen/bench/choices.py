"""Names the command line offers (methods, dtypes), kept free of torch so ``specgen --help`` answers at once."""

ALL_METHODS = ("autoregressive", "dflash", "classic", "hf-assisted", "hf-prompt-lookup", "hf-dflash", "eagle3",
               "whiflash", "fly", "fly-dflash")
# `specgen compare`: stock generate beside the default call of each lossless method with a drafter for the target
COMPARE_DEFAULT = ("autoregressive", "dflash", "eagle3", "whiflash")
LOSSLESS_DEFAULT = ("autoregressive", "dflash", "classic", "hf-assisted", "hf-prompt-lookup", "hf-dflash", "eagle3",
                    "whiflash")
DTYPE_NAMES = ("bf16", "fp32", "fp16")
