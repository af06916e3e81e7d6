"""Instruct models read observations through their tokenizer's chat template (`model.chat_template`).

A role's context is token ids that only grow (common/rollout.py), so the template is applied as
text pieces around each observation rather than re-rendering a whole conversation: the first
observation of a context becomes a user message opening the assistant's turn (the template's own
system prompt included); every later observation first closes the assistant's turn, then opens a
user message and the next assistant turn. The pieces are read off the template itself by rendering
one- and two-exchange conversations around marker strings, so any template that renders
conversations consistently (ChatML, Llama, SmolLM2, Qwen) works without a hand-written format.
The rollout and the SFT warm start's demonstrations both use `observation_text`, so both see the
same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_USER1, _ASSISTANT, _USER2 = "\x00USER1\x00", "\x00ASSISTANT\x00", "\x00USER2\x00"


@dataclass(frozen=True)
class ChatFormat:
    first_prefix: str  # before the first observation of a context (system prompt, user header)
    first_suffix: str  # after it (end of user message, assistant header)
    next_prefix: str  # before a later observation (end of the assistant's turn, user header)
    next_suffix: str  # after it
    # the tokenizer's EOS text: when a sampled action already ends with it, it is not repeated
    end_of_turn: str = ""

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> ChatFormat:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("model.chat_template=true but the tokenizer has no chat template; "
                             "set model.chat_template=false for a base (non-instruct) model")
        one = tokenizer.apply_chat_template([{"role": "user", "content": _USER1}], tokenize=False,
                                            add_generation_prompt=True)
        two = tokenizer.apply_chat_template(
            [{"role": "user", "content": _USER1}, {"role": "assistant", "content": _ASSISTANT},
             {"role": "user", "content": _USER2}], tokenize=False, add_generation_prompt=True)
        first_prefix, first_suffix = one.split(_USER1)
        after_assistant = two.split(_ASSISTANT, 1)[1]
        next_prefix, next_suffix = after_assistant.split(_USER2)
        return cls(first_prefix, first_suffix, next_prefix, next_suffix,
                   getattr(tokenizer, "eos_token", None) or "")

    def wrap(self, text: str, first: bool, after_end_of_turn: bool = False) -> str:
        if first:
            return self.first_prefix + text + self.first_suffix
        prefix = self.next_prefix
        if after_end_of_turn and self.end_of_turn and prefix.startswith(self.end_of_turn):
            prefix = prefix[len(self.end_of_turn):]  # the action closed its own turn (it stopped at EOS)
        return prefix + text + self.next_suffix


def observation_text(chat: ChatFormat | None, text: str, first: bool, after_end_of_turn: bool = False) -> str:
    """The text appended to a role's context for an observation (`first`: the context starts here;
    `after_end_of_turn`: the role's last action ended with the EOS token)."""
    return text if chat is None else chat.wrap(text, first, after_end_of_turn)


def demonstrated_action_ids(tokenizer: Any, action: str, stop: str) -> list[int]:
    """The token ids of a scripted demonstrator's action as a trained turn holds them: the action
    and the environment's stop string (what a sampled action ends with), or the EOS token when the
    environment has no stop string. The SFT warm start and teacher-forced plays both use it."""
    if stop:
        return tokenizer.encode(action + stop, add_special_tokens=False)
    return tokenizer.encode(action, add_special_tokens=False) + [tokenizer.eos_token_id]
