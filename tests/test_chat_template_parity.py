"""Our chat rendering equals `transformers`' `apply_chat_template`, on ten real model families'
templates (tests/chat_templates/real, MIT) plus tool-calling and `{% generation %}` templates:
the same text, the same ids token for token, the same refusals, and, where the template marks
generation blocks, our `loss_mask` equal to transformers' `assistant_masks`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easydata.text.chat import ChatError, ChatRenderer, Conversation, conversation_from_record
from easydata.text.tokenizer import load_tokenizer

TEMPLATES = Path(__file__).parent / "chat_templates"
REAL = sorted((TEMPLATES / "real").glob("*.jinja"))
#: The markers of every template above, added to the real Mistral tokenizer as special tokens.
MARKERS = ["<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
           "<|eot_id|>", "<start_of_turn>", "<end_of_turn>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>",
           "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<|endoftext|>"]

SYSTEM = {"role": "system", "content": "You are terse."}
TURNS = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
         {"role": "user", "content": "And 3 + 3, in words?"}, {"role": "assistant", "content": " Six, of course. "}]
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Adds two numbers.",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                                                           "b": {"type": "number"}}}}}]
CONVERSATIONS = {
    "system, two turns": [SYSTEM, *TURNS],
    "two turns": TURNS,
    "one turn": TURNS[:2],
}


def _template(path: Path) -> str:
    """As the templates' source says to use them: indentation and layout newlines removed."""
    text = path.read_text(encoding="utf-8")
    return text.replace("    ", "").replace("\n", "") if path.parent.name == "real" else text


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, mistral_tokenizer_dir) -> Path:
    from tokenizers import AddedToken, Tokenizer

    out = tmp_path_factory.mktemp("parity-tokenizer")
    tok = Tokenizer.from_file(str(mistral_tokenizer_dir / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(m, special=True, normalized=False) for m in MARKERS])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                           "unk_token": "<unk>"}))
    return out


@pytest.fixture(scope="module")
def ours(tokenizer_dir):
    return load_tokenizer(str(tokenizer_dir))


def _theirs(tokenizer_dir: Path, template: str):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_dir / "tokenizer.json"), bos_token="<s>",
                                  eos_token="</s>", unk_token="<unk>")
    tok.chat_template = template
    return tok


def _render_both(ours, theirs, template: str, messages: list, *, generation: bool, tools=None):
    """(our text or our ChatError, their text or their exception)."""
    renderer = ChatRenderer.for_tokenizer(ours, template)
    try:
        mine = renderer.render_text(Conversation(messages=[dict(m) for m in messages], tools=tools),
                                    generation_prompt=generation)
    except ChatError as e:
        mine = e
    try:
        expected = theirs.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=generation)
    except Exception as e:  # noqa: BLE001 - the template's own raise_exception, or a render error
        expected = e
    return mine, expected


def test_ten_real_families_are_here() -> None:
    assert len(REAL) == 10


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
@pytest.mark.parametrize("case", sorted(CONVERSATIONS))
@pytest.mark.parametrize("generation", [False, True])
def test_text_and_ids_equal_transformers(path: Path, case: str, generation: bool, ours, tokenizer_dir) -> None:
    template = _template(path)
    theirs = _theirs(tokenizer_dir, template)
    messages = CONVERSATIONS[case]
    if generation:
        messages = messages[:-1]  # a prompt waiting for the assistant
    mine, expected = _render_both(ours, theirs, template, messages, generation=generation)
    if isinstance(expected, Exception):  # e.g. a template that refuses a system turn: so do we
        assert isinstance(mine, ChatError), f"transformers refused ({expected}) but we rendered {mine!r}"
        return
    assert mine == expected
    their_ids = theirs.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation)["input_ids"]
    assert [int(i) for i in ours.encode_chat([mine])[0].ids] == list(their_ids)


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_training_rows_are_the_rendered_ids(path: Path, ours, tokenizer_dir) -> None:
    """What the pipeline trains on (render + encode_chat_batch, no EOS added) is transformers' ids."""
    template = _template(path)
    theirs = _theirs(tokenizer_dir, template)
    messages = [SYSTEM, *TURNS]
    try:
        their_ids = theirs.apply_chat_template(messages, tokenize=True)["input_ids"]
    except Exception:  # noqa: BLE001 - templates without system turns: the two-turn case
        messages = TURNS
        their_ids = theirs.apply_chat_template(messages, tokenize=True)["input_ids"]
    text, spans = ChatRenderer.for_tokenizer(ours, template).render(conversation_from_record(messages))
    ids, offsets, mask = ours.encode_chat_batch([text], [spans], add_eos=False)
    assert ids.tolist() == list(their_ids)
    trained = ours.decode(ids[mask == 1])
    assert "4." in trained and "Six, of course." in trained and "What is 2+2?" not in trained


@pytest.mark.parametrize("name", ["qwen2.5-instruct", "llama3_tools"])
def test_tools_render_like_transformers(name: str, ours, tokenizer_dir) -> None:
    path = TEMPLATES / "real" / f"{name}.jinja" if (TEMPLATES / "real" / f"{name}.jinja").exists() \
        else TEMPLATES / f"{name}.jinja"
    template = _template(path)
    theirs = _theirs(tokenizer_dir, template)
    mine, expected = _render_both(ours, theirs, template, [SYSTEM, *TURNS[:2]], generation=False, tools=TOOLS)
    assert not isinstance(expected, Exception) and mine == expected and '"name": "add"' in mine


def test_generation_blocks_give_transformers_assistant_masks(ours, tokenizer_dir) -> None:
    template = (TEMPLATES / "chatml_generation.jinja").read_text()
    theirs = _theirs(tokenizer_dir, template)
    messages = [SYSTEM, *TURNS]
    expected = theirs.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    text, spans = ChatRenderer.for_tokenizer(ours, template).render(conversation_from_record(messages))
    ids, _, mask = ours.encode_chat_batch([text], [spans], add_eos=False)
    assert ids.tolist() == list(expected["input_ids"])
    assert mask.tolist() == list(expected["assistant_masks"])


#: Conversation shapes every real template is tried with (the three above were all there was).
_LONG = [m for i in range(4) for m in ({"role": "user", "content": f"Question {i}: why {i}?"},
                                        {"role": "assistant", "content": f"Because {i}."})]
SHAPES = {
    "system, two turns": [SYSTEM, *TURNS],
    "no system, one turn": TURNS[:2],
    "system, eight turns": [SYSTEM, *_LONG],
    "ends with a user turn": [*TURNS, {"role": "user", "content": "Thanks!"}],
    "system, ends with a user turn": [SYSTEM, *TURNS, {"role": "user", "content": "Thanks!"}],
    "empty user content": [{"role": "user", "content": ""}, {"role": "assistant", "content": "Nothing asked."}],
    "whitespace-only assistant": [{"role": "user", "content": "Say nothing."}, {"role": "assistant", "content": "  "},
                                  {"role": "user", "content": "Now say yes."}, {"role": "assistant", "content": "Yes."}],
    "unicode": [{"role": "user", "content": "Ça va? 你好 👩‍💻 ﷽"}, {"role": "assistant", "content": "Très bien — 很好 🙂"}],
    "special-token text in content": [{"role": "user", "content": "Print </s> and <|im_end|> literally."},
                                      {"role": "assistant", "content": "Here: </s> <|im_end|> [INST]"}],
    "tool call": [{"role": "user", "content": "Add 2 and 3."},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
                  {"role": "tool", "content": "5"}, {"role": "assistant", "content": "It is 5."}],
}
ALL_TEMPLATES = [*REAL, TEMPLATES / "mistral_v3_style.jinja", TEMPLATES / "mistral_inst.jinja",
                 TEMPLATES / "chatml.jinja", TEMPLATES / "llama3_tools.jinja"]


@pytest.mark.slow
@pytest.mark.parametrize("path", ALL_TEMPLATES, ids=lambda p: p.stem)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_renders_like_transformers_and_trains_the_assistant(path: Path, shape: str, ours,
                                                                        tokenizer_dir) -> None:
    """Where transformers renders a conversation we render the same text and find every assistant turn in
    it (a Mistral v0.3-style template, ending with a user turn after a system message, was refused:
    "assistant message N does not appear in the rendered template"); where it refuses, so do we."""
    template = _template(path)
    theirs = _theirs(tokenizer_dir, template)
    messages = SHAPES[shape]
    mine, expected = _render_both(ours, theirs, template, messages, generation=False)
    if isinstance(expected, Exception):
        assert isinstance(mine, ChatError), f"transformers refused ({expected}) but we rendered {mine!r}"
        return
    assert mine == expected
    renderer = ChatRenderer.for_tokenizer(ours, template)
    if shape == "tool call" and "add" not in expected:  # the template ignores `tool_calls` (ChatML, Granite 3.0)
        with pytest.raises(ChatError, match="assistant message 1 calls add, which the chat template does not write"):
            renderer.render(conversation_from_record(messages))  # it would train an empty turn
        return
    text, spans = renderer.render(conversation_from_record(messages))
    assert text == expected
    trained = "".join(text[a:b] for a, b in spans)
    for message in messages:
        content = message["content"].strip()
        if message["role"] == "assistant" and content and content in text:
            assert content in trained, (content, spans)
        if message["role"] == "user" and content:
            assert content not in trained or content in "".join(m["content"] for m in messages
                                                                  if m["role"] == "assistant")
