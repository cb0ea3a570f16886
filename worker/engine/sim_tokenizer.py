"""A deterministic toy tokenizer for the simulated engine.

Vocabulary: a few special tokens, then all 256 bytes (so any text round-trips exactly), then a
fixed list of common words with a leading space (so ordinary English compresses about like a
real BPE: roughly one token per word) and the chat role names. Output tokens are drawn from
the word list only, which keeps simulated text readable and valid UTF-8.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from typing import Any

PAD, BOS, EOS, IM_START, IM_END = 0, 1, 2, 3, 4
SPECIALS = {PAD: "<pad>", BOS: "<s>", EOS: "</s>", IM_START: "<|im_start|>", IM_END: "<|im_end|>"}
BYTE_BASE = 16
WORD_BASE = BYTE_BASE + 256

_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "is",
    "it",
    "that",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "be",
    "at",
    "by",
    "this",
    "from",
    "or",
    "have",
    "an",
    "they",
    "which",
    "one",
    "you",
    "were",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "model",
    "token",
    "engine",
    "batch",
    "queue",
    "worker",
    "request",
    "stream",
    "cache",
    "job",
    "time",
    "fast",
    "slow",
    "small",
    "large",
    "first",
    "last",
    "next",
    "new",
    "old",
    "good",
    "great",
    "right",
    "left",
    "early",
    "late",
    "long",
    "short",
    "high",
    "low",
    "Paris",
    "France",
    "capital",
    "city",
    "river",
    "light",
    "water",
    "stone",
    "road",
    "house",
    "garden",
    "market",
    "morning",
    "night",
]
_PUNCT = [".", ",", "\n"]
_ROLES = ["system", "user", "assistant", "tool"]  # bare: they follow <|im_start|> in chats

_SPECIAL_RE = re.compile("|".join(re.escape(s) for s in SPECIALS.values()))
_PIECE_RE = re.compile(r" ?\w+| ?[^\w\s]+|\s+")


class SimTokenizer:
    def __init__(self) -> None:
        pieces = [" " + w for w in _WORDS] + _PUNCT + _ROLES
        self.word_ids = {p: WORD_BASE + i for i, p in enumerate(pieces)}
        self.id_text = {i: p for p, i in self.word_ids.items()}
        self.special_ids = {s: i for i, s in SPECIALS.items()}
        self.vocab_size = WORD_BASE + len(pieces)
        self.eos_id = EOS
        self.bos_id = BOS

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = [BOS] if add_bos else []
        pos = 0
        for m in _SPECIAL_RE.finditer(text):
            ids += self._encode_plain(text[pos : m.start()])
            ids.append(self.special_ids[m.group()])
            pos = m.end()
        ids += self._encode_plain(text[pos:])
        return ids

    def _encode_plain(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in _PIECE_RE.findall(text):
            wid = self.word_ids.get(piece)
            if wid is not None:
                ids.append(wid)
            else:
                ids += [BYTE_BASE + b for b in piece.encode("utf-8")]
        return ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        out: list[str] = []
        buf = bytearray()
        for t in token_ids:
            if BYTE_BASE <= t < WORD_BASE:
                buf.append(t - BYTE_BASE)
                continue
            if buf:
                out.append(buf.decode("utf-8", errors="replace"))
                buf.clear()
            if t in self.id_text:
                out.append(self.id_text[t])
            elif not skip_special_tokens and t in SPECIALS:
                out.append(SPECIALS[t])
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def stream_decoder(self) -> Callable[[int], str]:
        """A per-request incremental decoder: token id in, newly complete text out."""
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

        def step(t: int) -> str:
            if BYTE_BASE <= t < WORD_BASE:
                return dec.decode(bytes([t - BYTE_BASE]))
            return dec.decode(b"", final=True) + self.id_text.get(t, "")

        return step

    @property
    def num_output_words(self) -> int:
        return len(_WORDS)

    def pick(self, x: int) -> int:
        """Map a 64-bit hash to an output token (a word or punctuation)."""
        # Punctuation is rarer than words so sentences look like sentences.
        n = len(_WORDS)
        r = x % (n + 2)
        if r < n:
            return WORD_BASE + r
        return WORD_BASE + n + (x >> 16) % len(_PUNCT)

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        """A ChatML-style template (as SmolLM2 uses), with the generation prompt appended."""
        parts = []
        for m in messages:
            content = m.get("content") or ""
            if isinstance(content, list):  # OpenAI content parts: keep the text ones
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(f"<|im_start|>{m.get('role', 'user')}\n{content}<|im_end|>\n")
        parts.append("<|im_start|>assistant\n")
        return self.encode("".join(parts))
