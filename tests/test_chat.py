"""Chat rendering and assistant-only loss masks with three structurally different real-world templates.

ChatML, Mistral/Llama-2 `[INST]` (BOS, EOS closing assistant turns, strict alternation), and a
Llama-3.1-style template with a system prompt and tool calls, plus a `{% generation %}` template. For
multi-turn conversations, the tokens whose `loss_mask` is 1, decoded run by run, must be exactly the
assistant contents plus their end-of-turn token, and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from easydata.text.chat import ChatError, ChatRenderer, Conversation, conversation_from_record
from easydata.config import TokenizerConfig
from easydata.text.tokenizer import TokenizerHandle
from tests.conftest import trained_runs

TEMPLATES = Path(__file__).parent / "chat_templates"

CONVERSATION = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris is the capital of France."},
    {"role": "user", "content": "You said: Paris is the capital of France. And of Japan?"},
    {"role": "assistant", "content": "Tokyo."},
]
SHAREGPT = [{"from": "human", "value": m["content"]} if m["role"] == "user" else
            {"from": "gpt", "value": m["content"]} for m in CONVERSATION]


def _template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


@pytest.fixture(scope="module")
def tokenizer(chat_tokenizer_dir) -> TokenizerHandle:
    return TokenizerHandle(TokenizerConfig(name_or_path=str(chat_tokenizer_dir)))


def masked_runs(tokenizer: TokenizerHandle, template: str, content, record=None) -> tuple[list[str], str]:
    """Renders and tokenizes one conversation; returns the decoded runs of trained tokens and the text."""
    renderer = ChatRenderer.for_tokenizer(tokenizer, template)
    text, spans = renderer.render(conversation_from_record(content, record))
    ids, offsets, mask = tokenizer.encode_chat_batch([text], [spans], add_eos=False)
    assert np.array_equal(ids, tokenizer.tokenizer.encode(text, add_special_tokens=False).ids)
    return [tokenizer.decode(r) for r in trained_runs(ids, mask)], text


@pytest.mark.parametrize("name, end_of_turn", [("chatml", "<|im_end|>"), ("mistral_inst", "</s>"),
                                               ("llama3_tools", "<|eot_id|>"), ("chatml_generation", "<|im_end|>")])
@pytest.mark.parametrize("form", ["openai", "sharegpt"])
def test_mask_is_exactly_the_assistant_turns(tokenizer, name, end_of_turn, form):
    runs, text = masked_runs(tokenizer, _template(name), CONVERSATION if form == "openai" else SHAREGPT)
    assert [r.strip() for r in runs] == ["Paris is the capital of France." + end_of_turn, "Tokyo." + end_of_turn]
    assert "You said: Paris is the capital of France." in text  # the user quote is in the text, untrained


def test_llama3_system_prompt_and_tool_calls(tokenizer):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"city": "string"}}}]
    conversation = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "{\"temp_c\": 3}"},
        {"role": "assistant", "content": "It is 3 °C in Oslo."},
    ]
    runs, text = masked_runs(tokenizer, _template("llama3_tools"), conversation, {"tools": tools})
    assert [r.strip() for r in runs] == [
        '{"name": "get_weather", "parameters": {"city": "Oslo"}}<|eot_id|>', "It is 3 °C in Oslo.<|eot_id|>"]
    assert "Answer briefly." in text and "get_weather" in text.split("<|eot_id|>")[0]  # system + tool list


def test_qwen3_tool_calls_are_trained(qwen3_tokenizer_dir):
    """Qwen3's template is not prefix-stable (the last turn opens with an empty `<think>` block), so turns are
    located in the text; a tool-call turn has no content to find, and was left untrained: a model fine-tuned
    on agent data never learned to call a tool."""
    tokenizer = TokenizerHandle(TokenizerConfig(name_or_path=str(qwen3_tokenizer_dir)))
    conversation = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "{\"temp_c\": 3}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_wind", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "content": "{\"wind\": 5}"},
        {"role": "assistant", "content": "It is 3 °C in Oslo, wind 5 m/s."},
    ]
    runs, text = masked_runs(tokenizer, tokenizer.info.chat_template, conversation)
    assert [r.strip() for r in runs] == [
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>',
        '<tool_call>\n{"name": "get_wind", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>',
        "It is 3 °C in Oslo, wind 5 m/s.<|im_end|>"]
    assert text.count("<think>") == 1  # only the last turn's: the template is not prefix-stable


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning", "thinking"])
def test_qwen3_reasoning_is_trained_where_the_template_writes_it(qwen3_tokenizer_dir, field):
    """An assistant's `reasoning_content` is rendered in a `<think>` block before its content, and was cut from
    the loss (taken for a role header): reasoning data trained the answers only. Qwen3 writes the reasoning of
    turns after the last user message only; the reasoning it leaves out is in no row."""
    tokenizer = TokenizerHandle(TokenizerConfig(name_or_path=str(qwen3_tokenizer_dir)))
    template = tokenizer.info.chat_template.replace("reasoning_content", field) if field != "reasoning_content" \
        else tokenizer.info.chat_template
    single = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", field: "Two and two."}]
    runs, _ = masked_runs(tokenizer, template, single)
    assert [r.strip() for r in runs] == ["<think>\nTwo and two.\n</think>\n\n4<|im_end|>"]
    multi = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", field: "Two and two."},
             {"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6", field: "Three twice."}]
    runs, text = masked_runs(tokenizer, template, multi)
    assert [r.strip() for r in runs] == ["4<|im_end|>", "<think>\nThree twice.\n</think>\n\n6<|im_end|>"]
    assert "Two and two." not in text  # the template leaves an earlier turn's reasoning out


@pytest.mark.parametrize("content", [None, "Checking.", "Let me call get_weather for Oslo."])
def test_tool_calls_a_prefix_stable_template_ignores_are_refused(tokenizer, content):
    """ChatML ignores `tool_calls`: a call with no content rendered as an empty turn, trained as
    "<|im_end|>" right after the question (the model learnt to stop where it should call a tool). An answer
    that names the tool is not the call: it passed for written, and the call was lost from the row."""
    conversation = [{"role": "user", "content": "Weather in Oslo?"},
                    {"role": "assistant", "content": content, "tool_calls": [
                        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
                    {"role": "tool", "content": "3"}, {"role": "assistant", "content": "3 °C."}]
    with pytest.raises(ChatError, match="assistant message 1 calls get_weather, which the chat template does not"
                                        " write"):
        masked_runs(tokenizer, _template("chatml"), conversation)


def test_content_parts_of_the_responses_api_are_text(tokenizer):
    """OpenAI's Responses API writes text as `input_text` / `output_text` parts: only `text` parts were kept,
    so such a conversation rendered as empty turns and its text was in no row."""
    conversation = [{"role": "user", "content": [{"type": "input_text", "text": "2+2?"}]},
                    {"role": "assistant", "content": [{"type": "output_text", "text": "It is "},
                                                      {"type": "output_text", "text": "4."}]},
                    {"role": "user", "content": [{"type": "text", "text": "And 3+3?"}]},
                    {"role": "assistant", "content": [{"type": "refusal", "refusal": "I will not say."}]}]
    runs, text = masked_runs(tokenizer, _template("chatml"), conversation)
    assert [r.strip() for r in runs] == ["It is 4.<|im_end|>", "I will not say.<|im_end|>"]
    assert "2+2?" in text and "And 3+3?" in text


@pytest.mark.parametrize("part, reason", [
    ({"type": "image_url", "image_url": {"url": "cat.png"}}, "message 0 has a part of type 'image_url': only text"),
    ({"type": "input_audio", "input_audio": {"data": ""}}, "message 0 has a part of type 'input_audio'"),
    ({"type": "text"}, "message 0 has a 'text' part without its 'text' string"),
    ("What is this?", "message 0 has a part that is a str"),
])
def test_content_parts_that_are_not_text_are_refused(part, reason):
    """An image part was dropped without a word: the answer describing the picture was trained on the question
    alone. A record with a part a text tokenizer cannot train is a dead letter that names the part."""
    content = [part, {"type": "text", "text": "What is in this picture?"}]
    with pytest.raises(ChatError, match=reason):
        conversation_from_record([{"role": "user", "content": content}, {"role": "assistant", "content": "A cat."}])


@pytest.mark.parametrize("calls, reason", [
    ('[{"type": "function", "function": {"name": "get_weather", "arguments": {}}}]',
     "message 1 \\(assistant\\) 'tool_calls' is a str, not a list of objects \\(a JSON string: decode it first\\)"),
    (["get_weather"], "message 1 \\(assistant\\) 'tool_calls' is a list holding a non-object"),
])
def test_tool_calls_that_are_not_objects_are_refused(tokenizer, calls, reason):
    """Tool calls stored as a JSON string (as tables often keep them) were taken for a list of characters:
    ChatML trained the answer without its call, and Qwen3's template failed on an undefined value."""
    conversation = [{"role": "user", "content": "Weather in Oslo?"},
                    {"role": "assistant", "content": "Checking.", "tool_calls": calls}]
    with pytest.raises(ChatError, match=reason):
        masked_runs(tokenizer, _template("chatml"), conversation)


@pytest.mark.parametrize("system", ["Speak like a pirate.", [{"type": "text", "text": "Speak like "},
                                                               {"type": "text", "text": "a pirate."}]])
def test_a_system_field_beside_the_messages_is_the_system_prompt(tokenizer, system):
    """LLaMA-Factory's ShareGPT and Anthropic's Messages API keep the system prompt in a `system` field beside the
    messages (Anthropic's may be text blocks). It was ignored: every row trained the answers without their
    prompt, and nothing said so."""
    record = {"system": system, "conversations": SHAREGPT}
    runs, text = masked_runs(tokenizer, _template("chatml"), SHAREGPT, record)
    assert text.startswith("<|im_start|>system\nSpeak like a pirate.<|im_end|>")
    assert [r.strip() for r in runs] == ["Paris is the capital of France.<|im_end|>", "Tokyo.<|im_end|>"]
    with_message = [{"role": "system", "content": "Speak like a pirate."}, *CONVERSATION]
    assert conversation_from_record(with_message, {"system": "Speak like a pirate."}).messages == with_message
    assert conversation_from_record(CONVERSATION, {"system": ""}).messages == CONVERSATION  # LLaMA-Factory's "none"
    pair = conversation_from_record(None, {"system": "Be brief.", "prompt": [CONVERSATION[0]],
                                           "completion": [CONVERSATION[1]]})
    assert (pair.messages[0], pair.first_trained) == ({"role": "system", "content": "Be brief."}, 2)


def test_llama_factory_function_call_and_observation_turns(qwen3_tokenizer_dir):
    """LLaMA-Factory's ShareGPT writes an assistant's tool call as a `function_call` turn (JSON of the name and
    arguments), the tool's answer as an `observation` turn, and the tool list as a JSON string: such a record was
    a dead letter ("unknown role 'function_call'")."""
    tokenizer = TokenizerHandle(TokenizerConfig(name_or_path=str(qwen3_tokenizer_dir)))
    function = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}
    record = {"conversations": [
        {"from": "human", "value": "Weather in Oslo and Bergen?"},
        {"from": "function_call", "value": json.dumps([{"name": "get_weather", "arguments": {"city": "Oslo"}},
                                                       {"name": "get_weather", "arguments": {"city": "Bergen"}}])},
        {"from": "observation", "value": "3 and 5"},
        {"from": "gpt", "value": "3 °C in Oslo, 5 °C in Bergen."}], "tools": json.dumps([function])}
    conversation = conversation_from_record(record["conversations"], record)
    assert conversation.tools == [{"type": "function", "function": function}]
    assert [m["role"] for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    runs, text = masked_runs(tokenizer, tokenizer.info.chat_template, record["conversations"], record)
    call = '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{}"}}}}\n</tool_call>'
    assert [r.strip() for r in runs] == [call.format("Oslo") + "\n" + call.format("Bergen") + "<|im_end|>",
                                         "3 °C in Oslo, 5 °C in Bergen.<|im_end|>"]
    assert '"description": "Weather"' in text and "<tool_response>\n3 and 5\n</tool_response>" in text


@pytest.mark.parametrize("record", [
    {"tools": '[{"name": "f", "description": "a \\ud800"}]'},
    {"conversations": [{"from": "human", "value": "q"}, {"from": "function_call",
                                                          "value": '{"name": "f", "arguments": {"x": "\\udfff"}}'},
                       {"from": "observation", "value": "3"}, {"from": "gpt", "value": "a"}]},
])
def test_a_lone_surrogate_decoded_from_json_text_is_refused(qwen3_tokenizer_dir, record):
    """LLaMA-Factory's `tools` and `function_call` are JSON text, decoded after the record checks: a lone
    surrogate escaped in them reached the tokenizer, and the job failed with a traceback ("TextEncodeInput must
    be Union[...]"). The rendered conversation is refused instead, with the reason a record's own text gets."""
    tokenizer = TokenizerHandle(TokenizerConfig(name_or_path=str(qwen3_tokenizer_dir)))
    messages = record.get("conversations", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    with pytest.raises(ChatError, match="the rendered conversation holds a lone UTF-16 surrogate"):
        masked_runs(tokenizer, tokenizer.info.chat_template, messages, record)


def test_anthropic_content_blocks(qwen3_tokenizer_dir):
    """Anthropic's Messages API keeps an assistant's reasoning and tool calls as `thinking` and `tool_use` blocks,
    and the tool's answer as a `tool_result` block of the next user turn: each was a dead letter ("a part of
    type 'thinking'"). They are the message's `reasoning_content`, its `tool_calls` and a `tool` message."""
    tokenizer = TokenizerHandle(TokenizerConfig(name_or_path=str(qwen3_tokenizer_dir)))
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "3 °C"}]},
            {"type": "text", "text": "And should I wear a coat?"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "3 °C is cold.", "signature": "c2ln"},
                                          {"type": "text", "text": "Yes, a warm one."}]}]
    conversation = conversation_from_record(messages, {"system": [{"type": "text", "text": "Be kind."}]})
    assert conversation.messages[3:5] == [{"role": "tool", "content": "3 °C", "tool_call_id": "toolu_1"},
                                          {"role": "user", "content": "And should I wear a coat?"}]
    assert conversation.messages[2]["tool_calls"] == [{"id": "toolu_1", "type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Oslo"}}}]
    runs, text = masked_runs(tokenizer, tokenizer.info.chat_template, messages,
                             {"system": [{"type": "text", "text": "Be kind."}]})
    assert [r.strip() for r in runs] == [
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>',
        "<think>\n3 °C is cold.\n</think>\n\nYes, a warm one.<|im_end|>"]
    assert text.startswith("<|im_start|>system\nBe kind.<|im_end|>") and "<tool_response>\n3 °C\n" in text


def test_gemini_contents(qwen3_tokenizer_dir):
    """Gemini's tuning data (Vertex AI) keeps a turn's text in `parts`, the system prompt in `systemInstruction`,
    a call as a `functionCall` part of a `model` turn, its answer as a `functionResponse` part, reasoning as a
    `thought` part and the tools as `functionDeclarations`: every such record was a dead letter ("message 0
    (user) has no content")."""
    tokenizer = TokenizerHandle(TokenizerConfig(name_or_path=str(qwen3_tokenizer_dir)))
    function = {"name": "get_weather", "parameters": {"type": "object"}}
    record = {"systemInstruction": {"role": "system", "parts": [{"text": "Be brief."}]},
              "tools": [{"functionDeclarations": [function]}],
              "contents": [
                  {"role": "user", "parts": [{"text": "Weather in Oslo?"}]},
                  {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}]},
                  {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"c": 3}}}]},
                  {"role": "model", "parts": [{"text": "Cold.", "thought": True}, {"text": "3 °C."}]}]}
    conversation = conversation_from_record(record["contents"], record)
    assert conversation.tools == [{"type": "function", "function": function}]
    assert conversation.messages[:2] == [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Weather in Oslo?"}]
    assert conversation.messages[3] == {"role": "tool", "content": '{"c": 3}', "name": "get_weather"}
    runs, _ = masked_runs(tokenizer, tokenizer.info.chat_template, record["contents"], record)
    assert [r.strip() for r in runs] == [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>',
        "<think>\nCold.\n</think>\n\n3 °C.<|im_end|>"]
    with pytest.raises(ChatError, match="message 0 has a part of type 'inlineData': only text parts"):
        conversation_from_record([{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png"}}]},
                                  {"role": "model", "parts": [{"text": "A cat."}]}])


@pytest.mark.parametrize("message, record, reason", [
    ({"from": "function_call", "value": "get_weather(city='Oslo')"}, {},
     "message 1 \\(function_call\\) is not JSON: Expecting value at column 1"),
    ({"from": "function_call", "value": '{"arguments": {}}'}, {},
     "message 1 \\(function_call\\) is not a call \\(an object with a 'name'\\) or a list of them"),
    ({"role": "assistant", "content": [{"type": "redacted_thinking", "data": "EmwK"}]}, {},
     "message 1 has a part of type 'redacted_thinking': only text parts"),
    ({"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "3"}]}, {},
     "message 1 \\(assistant\\) has a part of type 'tool_result', a block only user messages hold"),
    ({"role": "assistant", "content": [{"type": "thinking"}, {"type": "text", "text": "a"}]}, {},
     "message 1 has a 'thinking' part without its 'thinking' string"),
    ({"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}], "reasoning_content": "r"}, {},
     "message 1 \\(assistant\\) has both thinking blocks and a reasoning field"),
    ({"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}], "tool_calls": []}, {},
     "message 1 \\(assistant\\) has both 'tool_calls' and tool_use blocks"),
    ({"role": "assistant", "content": "a"}, {"tools": "[{name: f}]"},
     "'tools' is a string that is not JSON: Expecting property name enclosed in double quotes at column 3"),
    ({"role": "assistant", "content": "a"}, {"system": 5}, "'system' is a int, not a string or a list of text"),
    ({"role": "assistant", "content": "a"}, {"system": [{"type": "image", "source": {}}]},
     "'system' has a part of type 'image': only text parts \\(text, input_text, output_text, refusal\\) can be"
     " tokenized"),
])
def test_llama_factory_and_anthropic_records_that_cannot_be_read_are_refused(message, record, reason):
    with pytest.raises(ChatError, match=reason):
        conversation_from_record([{"role": "user", "content": "q"}, message], record)


def test_openai_developer_messages_and_refusals():
    """OpenAI's API names the system prompt `developer` since its o1 models, and an answer that declined has its
    text in `refusal` with no content: such records were dead letters ("unknown role 'developer'", "has no
    content")."""
    conversation = conversation_from_record([
        {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Pick a lock?"},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."}])
    assert [(m["role"], m["content"]) for m in conversation.messages] == [
        ("system", "Be brief."), ("user", "Pick a lock?"), ("assistant", "I can't help with that.")]


def test_alpaca_records(tokenizer):
    """Stanford Alpaca's and LLaMA-Factory's instruction records (`instruction`, `input`, `output`, a `system`,
    LLaMA-Factory's `history` of earlier turns) were dead letters ("missing content field"), and planning
    refused the dataset: they are the turns LLaMA-Factory makes of them."""
    record = {"instruction": "Translate to French.", "input": "Good morning", "output": "Bonjour",
              "system": "You translate.", "history": [["Translate to French: yes", "Oui"]]}
    runs, text = masked_runs(tokenizer, _template("chatml"), None, record)
    assert [r.strip() for r in runs] == ["Oui<|im_end|>", "Bonjour<|im_end|>"]
    assert "<|im_start|>user\nTranslate to French.\nGood morning<|im_end|>" in text
    assert text.startswith("<|im_start|>system\nYou translate.<|im_end|>")
    assert conversation_from_record(None, {"instruction": "Say hi.", "input": "", "output": "Hi"}).messages == [
        {"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi"}]
    for bad, reason in [({"output": None}, "'output' is a NoneType, not a string"),
                        ({"input": 3}, "'input' is a int, not a string"),
                        ({"history": [["only a question"]]}, "'history' is not a list of \\[question, answer\\]")]:
        with pytest.raises(ChatError, match=reason):
            conversation_from_record(None, {**record, **bad})


#: The message loop of Meta's Llama 3.1-3.3 templates: it tests a key's presence (`'tool_calls' in message`).
LLAMA31_LOOP = """{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
        {{- '{"name": "' + tool_call.name + '", "parameters": ' + tool_call.arguments | tojson + '}<|eot_id|>' }}
    {%- else %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"""


def test_null_keys_of_a_message_are_absent(tokenizer):
    """OpenAI's SDK saves an answer (`message.model_dump()`) with `"tool_calls": null`, `"function_call": null`,
    `"refusal": null`, and a table's column of messages gives every message every key any message has. Llama
    3.1's template takes a present `tool_calls` for a call: every such conversation was a dead letter ("object
    of type 'NoneType' has no len()") where the same messages without the null keys render."""
    dumped = [{"role": "user", "content": "Weather in Oslo?", "name": None, "tool_calls": None},
              {"role": "assistant", "content": None, "refusal": None, "function_call": None, "audio": None,
               "tool_calls": [{"id": "c1", "type": "function", "index": None,
                               "function": {"name": "get_weather", "arguments": {"city": "Oslo", "unit": None}}}]},
              {"role": "tool", "content": "3", "tool_call_id": "c1", "tool_calls": None},
              {"role": "assistant", "content": "3 °C.", "refusal": None, "function_call": None, "audio": None,
               "tool_calls": None}]
    runs, _ = masked_runs(tokenizer, LLAMA31_LOOP, dumped)
    assert [r.strip() for r in runs] == [  # a null argument is a value: kept
        '{"name": "get_weather", "parameters": {"city": "Oslo", "unit": null}}<|eot_id|>', "3 °C.<|eot_id|>"]
    tools = conversation_from_record(dumped, {"tools": [{"type": "function", "function": {
        "name": "get_weather", "description": None, "parameters": {"type": "object"}}}]}).tools
    assert tools == [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def test_a_system_field_and_a_different_system_message_are_refused():
    with pytest.raises(ChatError, match="the record has a 'system' field and a system message that differ"):
        conversation_from_record([{"role": "system", "content": "A."}, *CONVERSATION], {"system": "B."})


def test_a_tool_result_that_holds_an_image_is_refused():
    result = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}
    with pytest.raises(ChatError, match="message 2's tool_result has a part of type 'image': only text parts"
                                        " \\(text, input_text, output_text, refusal\\) can be tokenized$"):
        conversation_from_record([{"role": "user", "content": "q"}, {"role": "assistant", "content": [
            {"type": "tool_use", "name": "f", "input": {}}]}, {"role": "user", "content": [result]}])


def test_todays_date_in_a_template_is_the_same_on_every_day(tokenizer):
    """Llama 3.1's template writes `strftime_now("%d %b %Y")` into the system header of every conversation: the
    rows depended on the day the run ran, and a run resumed after midnight held two dates."""
    template = ('{%- if not date_string is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- endif %}'
                "Today Date: {{ date_string }}\n" + _template("chatml"))
    _, text = masked_runs(tokenizer, template, CONVERSATION)
    assert text.startswith("Today Date: 26 Jul 2024\n")


def test_tool_calls_a_template_does_not_write_are_refused(tokenizer):
    template = ("{% for m in messages %}{{ m.role }}: {{ m.content }}{% if m.role == 'assistant' %}</s>{% endif %}"
                "{% if loop.last %} [end]{% endif %}\n{% endfor %}")
    conversation = [{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": None,
                     "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]},
                    {"role": "tool", "content": "1"}, {"role": "assistant", "content": "ok"}]
    with pytest.raises(ChatError, match="assistant message 1 \\(tool calls\\) does not appear"):
        masked_runs(tokenizer, template, conversation)


def test_mistral_template_with_the_real_tokenizer(mistral_tokenizer_dir):
    tokenizer = TokenizerHandle(TokenizerConfig(name_or_path=str(mistral_tokenizer_dir)))
    runs, text = masked_runs(tokenizer, _template("mistral_inst"), CONVERSATION)
    assert text.startswith("<s>[INST] What is")
    assert [r.strip() for r in runs] == ["Paris is the capital of France.</s>", "Tokyo.</s>"]


def test_prompt_completion_pairs(tokenizer):
    runs, _ = masked_runs(tokenizer, _template("chatml"), None, {"prompt": "2+2?", "completion": "4"})
    assert [r.strip() for r in runs] == ["4<|im_end|>"]


@pytest.mark.parametrize("name", ["chatml", "chatml_generation", "llama3_tools"])
def test_conversational_prompt_completion(tokenizer, name):
    """TRL's conversational prompt-completion (two lists of messages) was a "missing content field" dead letter.
    The completion's assistant turns are trained; a few-shot assistant turn in the prompt is context."""
    record = {"prompt": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "1+1?"},
                         {"role": "assistant", "content": "Two."}, {"role": "user", "content": "2+2?"}],
              "completion": [{"role": "assistant", "content": "Four."}]}
    runs, text = masked_runs(tokenizer, _template(name), None, record)
    assert [r.strip() for r in runs] == [f"Four.{'<|eot_id|>' if name == 'llama3_tools' else '<|im_end|>'}"]
    assert "Two." in text and "Be terse." in text


@pytest.mark.parametrize("name", ["chatml", "chatml_generation", "llama3_tools", "qwen3"])
def test_assistant_messages_of_weight_0_are_context(tokenizer, qwen3_tokenizer_dir, name):
    """OpenAI's fine-tuning format leaves an assistant message with `weight: 0` untrained: every such turn was
    trained. The same turns through a prefix-stable template, `{% generation %}` marks and Qwen3's (which is not
    prefix-stable)."""
    if name == "qwen3":
        tokenizer = TokenizerHandle(TokenizerConfig(name_or_path=str(qwen3_tokenizer_dir)))
    template = tokenizer.info.chat_template if name == "qwen3" else _template(name)
    end = "<|eot_id|>" if name == "llama3_tools" else "<|im_end|>"
    conversation = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "Three.", "weight": 0},
                    {"role": "user", "content": "Wrong. 1+1?"}, {"role": "assistant", "content": "Two.", "weight": 1},
                    {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "Four."}]
    runs, text = masked_runs(tokenizer, template, conversation)
    assert [r.strip() for r in runs] == [f"Two.{end}", f"Four.{end}"]
    assert "Three." in text
    conversation[3]["weight"] = 0
    runs, _ = masked_runs(tokenizer, template, conversation)
    assert [r.strip() for r in runs] == [f"Four.{end}"]


@pytest.mark.parametrize("weight, reason", [
    (0.5, "message 1 \\(assistant\\) weight 0.5 is not 0 or 1"),
    ("0", "message 1 \\(assistant\\) weight '0' is not 0 or 1"),
    (0, "every assistant message has weight 0: nothing to train"),
])
def test_weights_that_are_not_0_or_1_or_leave_nothing_to_train_are_refused(weight, reason):
    with pytest.raises(ChatError, match=reason):
        conversation_from_record([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a",
                                                                     "weight": weight}])


@pytest.mark.parametrize("record, reason", [
    ({"prompt": [{"role": "user", "content": "q"}], "completion": []}, "completion must be a non-empty list"),
    ({"prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
      "completion": [{"role": "user", "content": "q2"}]}, "completion has no assistant message"),
])
def test_conversational_prompt_completion_problems(record, reason):
    with pytest.raises(ChatError, match=reason):
        conversation_from_record(None, record)


def test_template_that_is_not_prefix_stable_falls_back_to_locating_contents(tokenizer):
    # The last turn is rendered differently, so prefixes are not prefixes of the whole text.
    template = ("{% for m in messages %}{% if loop.last %}[final] {% endif %}{{ m.role }}: {{ m.content }}"
                "{% if m.role == 'assistant' %}</s>{% endif %}\n{% endfor %}")
    runs, _ = masked_runs(tokenizer, template, CONVERSATION)
    assert [r.strip() for r in runs] == ["Paris is the capital of France.</s>", "Tokyo.</s>"]


@pytest.mark.parametrize("content, reason", [
    ("not a list", "messages must be a non-empty list"),
    ([], "messages must be a non-empty list"),
    ([{"role": "user", "content": "hi"}], "conversation has no assistant message"),
    ([{"role": "narrator", "content": "x"}, {"role": "assistant", "content": "y"}], "message 0 has unknown role 'narrator'"),
    (["hi", {"role": "assistant", "content": "y"}], "message 0 is a str, not an object"),
    ([{"content": "x"}], "message 0 has neither 'role' nor 'from'"),
    ([{"role": "user", "content": 5}, {"role": "assistant", "content": "y"}],
     "message 0 (user) content is a int, not a string"),
])
def test_invalid_conversations_are_refused_with_a_reason(content, reason):
    with pytest.raises(ChatError) as info:
        conversation_from_record(content, {})
    assert str(info.value) == reason


def test_template_errors_are_refused_never_a_fallback(tokenizer):
    renderer = ChatRenderer.for_tokenizer(tokenizer, _template("mistral_inst"))
    with_system = [{"role": "system", "content": "Be nice."}] + CONVERSATION
    with pytest.raises(ChatError) as info:
        renderer.render(conversation_from_record(with_system))
    assert str(info.value) == ("chat template error: TemplateError: Conversation roles must alternate"
                               " user/assistant/user/assistant/...")


def test_assistant_text_the_template_drops_is_refused(tokenizer):
    renderer = ChatRenderer("{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}",
                            {}, ["</s>"])
    with pytest.raises(ChatError) as info:
        renderer.render(conversation_from_record(CONVERSATION))
    assert str(info.value) == "assistant message 1 does not appear in the rendered template"


def test_a_template_that_does_not_parse_is_a_value_error():
    with pytest.raises(ValueError) as info:
        ChatRenderer("{% for m in messages %}", {}, [])
    assert str(info.value).startswith("chat template does not parse:")


# ---- hostile templates: bounded sizes, dead letters instead of memory blow-ups ---------------------------


@pytest.mark.slow
@pytest.mark.parametrize("bomb", [
    "{{ 'A' * 10**10 }}", "{{ 10**10 * 'A' }}", "{{ [0] * 10**10 }}", "{{ ('A' * 10**6) * 10**4 }}",
    "{{ 'A'.ljust(10**10) }}", "{{ 'A'.center(10**10) }}", "{{ 'A'.zfill(10**10) }}", "{{ 'x'|center(10**10) }}",
    "{{ 'x'|indent(10**10, true) }}", "{{ '%10000000000s' % 'x' }}", "{{ '{:>10000000000}'.format('x') }}",
    "{{ '%10000000000s'|format('x') }}", "{% for i in range(10**9) %}x{% endfor %}",
    "{% set s = namespace(x='a') %}{% for i in range(100) %}{% set s.x = s.x + s.x %}{% endfor %}{{ s.x }}",
    # work per record: nested loops (hung and reached 6 GB), loops over strings, sizes built in all
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for c in 'a' * 100000 %}{% for d in 'b' * 100000 %}{% endfor %}{% endfor %}",
    "{% set s %}{% for i in range(100000) %}{% for j in range(9) %}" + "y" * 2000 + "{% endfor %}{% endfor %}"
    "{% endset %}{{ s }}",
    "{% for i in range(1000) %}{{ 'z' * 1000000 }}{% endfor %}",
    "{{ messages|tojson(indent=1e8) }}", "{{ messages|tojson(indent=10**8) }}",
])
def test_template_bombs_are_chat_errors_in_bounded_memory(bomb):
    """`{{ 'A' * 10**10 }}` took 6 GB in 4 s; each of these now fails before building the value."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    renderer = ChatRenderer(bomb + "{% for m in messages %}{{ m.content }}{% endfor %}", {}, ())
    conversation = Conversation(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                tools=None)
    with pytest.raises(ChatError, match="chat template error: (SecurityError|OverflowError)"):
        renderer.render(conversation)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024  # KiB: under 0.5 GB more


def test_bounded_templates_still_pad_and_format_normally():
    renderer = ChatRenderer("{{ 'x'|center(5) }}|{{ 'a\\nb'|indent(2) }}|{{ '%3s'|format('y') }}|{{ '%-3d' % 4 }}|"
                            "{{ '{:>3}'.format('z') }}|{{ 'ab' * 2 }}|{{ [1] + [2] }}|{{ 2 ** 10 }}"
                            "{% for m in messages %}{{ m.content }}{% endfor %}", {}, ())
    text, _ = renderer.render(Conversation(messages=[{"role": "user", "content": "q"},
                                                     {"role": "assistant", "content": "a"}], tools=None))
    assert text == "  x  |a\n  b|  y|4  |  z|abab|[1, 2]|1024qa"


@pytest.mark.parametrize("name", ["chatml", "llama3", "mistral", "gemma", "phi3"])
def test_named_templates_ship_with_the_package_and_render(name, chat_tokenizer_dir) -> None:
    """`chat.template: chatml` (docs/configuration.md pointed at a templates/chatml.jinja that did not exist)."""
    from easydata.run.run_plan import load_chat_template
    from easydata.text.chat_templates import NAMED_TEMPLATES, named_template
    from easydata.text.tokenizer import load_tokenizer

    assert name in NAMED_TEMPLATES and load_chat_template(name) == named_template(name)
    renderer = ChatRenderer.for_tokenizer(load_tokenizer(str(chat_tokenizer_dir)), named_template(name))
    text, spans = renderer.render(conversation_from_record([{"role": "user", "content": "Hi there"},
                                                            {"role": "assistant", "content": "Hello back"}]))
    assert "Hi there" in text and "Hello back" in "".join(text[a:b] for a, b in spans)


@pytest.mark.slow
def test_a_run_with_a_named_template(tmp_path, chat_tokenizer_dir) -> None:
    from easydata.cli import main

    (tmp_path / "chat").mkdir()
    (tmp_path / "chat" / "a.jsonl").write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}) + "\n" for i in range(10)))
    (tmp_path / "job.yaml").write_text(f"default_tokenizer: {chat_tokenizer_dir}\ndatasets:\n  - name: chat\n"
                                       f"    data_files: {tmp_path / 'chat' / 'a.jsonl'}\nchat:\n  template: chatml\n"
                                       f"save:\n  output_dir: {tmp_path / 'out'}\n")
    assert main(["run", str(tmp_path / "job.yaml"), "--quiet", "--direct_num_workers=1"]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["documents_written"] == 10
    assert main(["run", str(tmp_path / "job.yaml"), "--quiet", "--set", "chat.template=chatmll",
                 "--set", f"save.output_dir={tmp_path / 'out2'}"]) == 2


def test_template_kwargs_reach_the_template(tmp_path, chat_tokenizer_dir) -> None:
    """`chat.template_kwargs` are the template's variables, as `apply_chat_template(**kwargs)`'s (Llama 3.1's
    `date_string`, Qwen3's `enable_thinking`): there was no way to set them. Through the real CLI and its file."""
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    from easydata.cli import main

    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}) + "\n" for i in range(4)))
    (tmp_path / "t.jinja").write_text("{% if date_string is defined %}Today {{ date_string }}.{% endif %}"
                                      "{% if not enable_thinking %}No thinking.{% endif %}\n" + _template("chatml"))
    (tmp_path / "job.yaml").write_text(
        f"default_tokenizer: {chat_tokenizer_dir}\ndatasets:\n  - name: chat\n    data_files: {tmp_path / 'a.jsonl'}\n"
        f"chat:\n  template: {tmp_path / 't.jinja'}\n  template_kwargs:\n    date_string: 01 Jan 2025\n"
        f"    enable_thinking: false\nsave:\n  output_dir: {tmp_path / 'out'}\n")
    assert main(["run", str(tmp_path / "job.yaml"), "--quiet", "--direct_num_workers=1"]) == 0
    decode = Tokenizer.from_file(str(chat_tokenizer_dir / "tokenizer.json")).decode
    rows = pq.read_table(next((tmp_path / "out" / "chat").glob("*.parquet"))).column("input_ids").to_pylist()
    assert len(rows) == 4 and all(decode(r).replace(" ", "").startswith("Today01Jan2025.Nothinking.") for r in rows)
    assert main(["run", str(tmp_path / "job.yaml"), "--quiet", "--set", "chat.template_kwargs.messages=[]",
                 "--set", f"save.output_dir={tmp_path / 'out2'}"]) == 2


def test_llama_factory_and_anthropic_files_through_the_cli(tmp_path, qwen3_tokenizer_dir) -> None:
    """A LLaMA-Factory ShareGPT file (a `system` field, `function_call` and `observation` turns, tools as a JSON
    string), Anthropic Messages records, an Alpaca record and a CSV file's messages kept as JSON text, through the
    real CLI with Qwen3's own template: every record is a
    row, and its trained tokens are the assistant's calls and answers."""
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    from easydata.cli import main

    llama_factory = {"conversations": [
        {"from": "human", "value": "Weather in Oslo?"},
        {"from": "function_call", "value": '{"name": "get_weather", "arguments": {"city": "Oslo"}}'},
        {"from": "observation", "value": "3"}, {"from": "gpt", "value": "It is 3 °C."}],
        "system": "Be brief.", "tools": '[{"name": "get_weather", "parameters": {"type": "object"}}]'}
    anthropic = {"system": "Be kind.", "conversations": [
        {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Small sums.", "signature": "x"},
                                          {"type": "text", "text": "4"}]}]}
    alpaca = {"instruction": "Say hi.", "input": "", "output": "Hi!", "system": ""}
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (llama_factory, anthropic, alpaca)))
    messages = json.dumps([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo."}])
    (tmp_path / "b.csv").write_text('messages,system\n"' + messages.replace('"', '""') + '",Be short.\n')
    (tmp_path / "job.yaml").write_text(
        f"default_tokenizer: {qwen3_tokenizer_dir}\ndatasets:\n  - name: chat\n    data_files: {tmp_path / 'a.jsonl'}\n"
        f"    content_field: conversations\n  - name: csv\n    data_files: {tmp_path / 'b.csv'}\n"
        f"    content_field: messages\nsave:\n  output_dir: {tmp_path / 'out'}\n")
    assert main(["run", str(tmp_path / "job.yaml"), "--quiet", "--direct_num_workers=1"]) == 0
    decode = Tokenizer.from_file(str(qwen3_tokenizer_dir / "tokenizer.json")).decode
    csv_row = pq.read_table(next((tmp_path / "out" / "csv").glob("*.parquet"))).to_pylist()  # JSON text: a chat
    assert [decode(r["input_ids"], skip_special_tokens=False).split("<think>")[0] for r in csv_row] == [
        "<|im_start|>system\nBe short.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"]
    assert [decode(run, skip_special_tokens=False).strip() for run in trained_runs(
        np.array(csv_row[0]["input_ids"]), np.array(csv_row[0]["loss_mask"]))] == ["Yo.<|im_end|>"]
    table = pq.read_table(next((tmp_path / "out" / "chat").glob("*.parquet")))
    rows = sorted(zip(table.column("input_ids").to_pylist(), table.column("loss_mask").to_pylist()))
    texts = sorted(decode(ids, skip_special_tokens=False) for ids, _ in rows)
    assert texts[0].startswith("<|im_start|>system\nBe brief.\n\n# Tools") and '{"name": "get_weather"' in texts[0]
    assert texts[1].startswith("<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>")
    assert texts[2].startswith("<|im_start|>user\nSay hi.<|im_end|>")
    trained = sorted(decode(list(trained_run), skip_special_tokens=False).strip()
                     for ids, mask in rows for trained_run in trained_runs(np.array(ids), np.array(mask)))
    assert trained == ['<think>\nSmall sums.\n</think>\n\n4<|im_end|>',
                       '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>',
                       "Hi!<|im_end|>", "It is 3 °C.<|im_end|>"]


def test_the_chat_stage_names_the_file_as_the_reader_does(tmp_path):
    """A record the template refuses named its file by its key name ('b.jsonl'), a record the reader refuses
    by its path, and its excerpt was JSON where the reader's was the record's `repr` (both JSON now): one
    dead-letter file listed one input two ways. Two files' records in one batch each name their own file."""
    from easydata.config import DatasetConfig
    from easydata.io.documents import record_excerpt
    from easydata.io.sources import plan_input, read_splits
    from easydata.text.chat_stage import render_batch

    dropped = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "kept out"}]
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"messages": CONVERSATION}) + "\n"
                                                + json.dumps({"messages": dropped}) + "\n"
                                                + json.dumps({"messages": []}) + "\n")
    ds = DatasetConfig(name="chat", data_files=str(tmp_path / "*.jsonl"))
    read_rejects: list = []
    batch, = list(read_splits(plan_input(ds).splits, ds, rejects=read_rejects))
    renderer = ChatRenderer("{% for m in messages %}{% if m.content != 'kept out' %}{{ m.content }}{% endif %}"
                            "{% endfor %}", {}, ["</s>"])
    _, template_rejects = render_batch(batch, renderer, assistant_only_loss=False)
    assert [r.source for r in read_rejects] == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    assert [r.source for r in template_rejects] == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    assert [r.reason for r in template_rejects] == ["assistant message 1 does not appear in the rendered template"] * 2
    assert template_rejects[0].excerpt == record_excerpt(dropped) and read_rejects[0].excerpt == '{"messages": []}'
