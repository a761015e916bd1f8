"""Names the command line offers (methods, dtypes), kept free of torch so ``specgen --help`` answers at once."""

ALL_METHODS = ("autoregressive", "dflash", "classic", "hf-assisted", "hf-prompt-lookup", "hf-dflash", "eagle3",
               "whiflash", "fly", "fly-dflash")
LOSSLESS_DEFAULT = ("autoregressive", "dflash", "classic", "hf-assisted", "hf-prompt-lookup", "hf-dflash", "eagle3",
                    "whiflash")
DTYPE_NAMES = ("bf16", "fp32", "fp16")
