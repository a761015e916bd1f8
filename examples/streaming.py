"""Streaming: speculative decoding with transformers' streamers, tokens printed as each round commits them.

    python examples/streaming.py

Offline on a CPU with the embedded tiny world and its DFlash drafter. Any `BaseStreamer` works
(`TextIteratorStreamer` for a web server, as the Space in space/app.py does).
"""

from transformers import AutoModelForCausalLM, AutoTokenizer, TextStreamer

import hf_specgen

tokenizer = AutoTokenizer.from_pretrained(hf_specgen.embedded_model("specgen-tiny"))
target = hf_specgen.enable(AutoModelForCausalLM.from_pretrained(hf_specgen.embedded_model("specgen-tiny"),
                                                                dtype=hf_specgen.auto_dtype()))
dflash = hf_specgen.load_drafter(hf_specgen.embedded_model("specgen-tiny-dflash-b16"), dtype=hf_specgen.auto_dtype())

messages = [{"role": "user", "content": "Complete this function:\ndef mean(values):"}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)["input_ids"]
streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
out = target.generate(input_ids, assistant_model=dflash, speculative_mode="dflash", max_new_tokens=64,
                      streamer=streamer, return_dict_in_generate=True)
print(f"\n{out.speculative_stats.num_rounds} rounds for {out.sequences.shape[1] - input_ids.shape[1]} tokens")
