"""Pure detection of stored-object references in client bodies (gatewayd.formats.stored_objects)."""

from __future__ import annotations

import pytest

from gatewayd.formats.errors import TranslationError
from gatewayd.formats.stored_objects import answer_received_ids, asked_response_ids, refuse_stored_objects


def refused(client_format: str, body: dict) -> str:
    """The param of the refusal (and its message must name it)."""
    with pytest.raises(TranslationError) as caught:
        refuse_stored_objects(client_format, body)
    assert caught.value.param
    assert caught.value.param.split(".")[0].split("[")[0] in caught.value.message
    return caught.value.param


def passes(client_format: str, body: dict) -> None:
    refuse_stored_objects(client_format, body)


# -- responses ------------------------------------------------------------------------------

RESPONSES_REFUSED = [
    ({"background": True}, "background"),
    ({"background": "yes"}, "background"),
    ({"prompt": {"id": "pmpt_1", "version": "2"}}, "prompt"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]},
     "input[0].content[0].file_id"),
    ({"input": [{"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "hi"}, {"type": "input_image", "file_id": "file-2"}]}]},
     "input[0].content[1].file_id"),
    ({"input": ["x", {"type": "function_call_output", "call_id": "c",
                      "output": [{"type": "input_image", "file_id": "file-3", "detail": "auto"}]}]},
     "input[1].output[0].file_id"),
    ({"input": [{"type": "computer_call_output", "call_id": "c",
                 "output": {"type": "computer_screenshot", "file_id": "file-4"}}]}, "input[0].output.file_id"),
    ({"input": [{"type": "item_reference", "id": "msg_abc"}]}, "input[0]"),
    ({"tools": [{"type": "function", "name": "f"}, {"type": "file_search", "vector_store_ids": ["vs_1"]}]},
     "tools[1].vector_store_ids"),
    ({"tools": [{"type": "code_interpreter", "container": "cntr_1"}]}, "tools[0].container"),
    ({"tools": [{"type": "code_interpreter", "container": {"type": "auto", "file_ids": ["file-5"]}}]},
     "tools[0].container.file_ids"),
    ({"tools": [{"type": "image_generation", "input_image_mask": {"file_id": "file-6"}}]},
     "tools[0].input_image_mask.file_id"),
]


@pytest.mark.parametrize("extra,param", RESPONSES_REFUSED)
def test_responses_stored_objects_are_refused_naming_the_field(extra, param):
    assert refused("responses", {"model": "m", "input": "hi", **extra}) == param


def test_an_item_reference_refusal_says_to_send_store_false():
    with pytest.raises(TranslationError) as info:
        refuse_stored_objects("responses", {"model": "m", "input": ["x", {"type": "item_reference", "id": "msg_1"}]})
    assert info.value.param == "input[1]"
    assert "send store: false" in info.value.message and "providerOptions: { openai: { store: false } }" in \
        info.value.message


def test_responses_that_only_look_like_references_pass():
    body = {
        "model": "m", "store": False, "background": False, "prompt": None,
        "input": [
            # Codex sends its earlier output items back with their own ids: content, not references
            {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "file_id: file-7"},
            {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                                         {"type": "input_file", "file_data": "data:application/pdf;base64,AA",
                                          "filename": "a.pdf"},
                                         {"type": "input_file", "file_url": "https://example.com/a.pdf"}]},
        ],
        # a tool's schema may have properties with any name: text for the model
        "tools": [{"type": "function", "name": "upload", "parameters": {
            "type": "object", "properties": {"file_id": {"type": "string"}, "vector_store_ids": {"type": "array"},
                                             "container": {"type": "string"}}}},
                  {"type": "code_interpreter", "container": {"type": "auto"}},
                  {"type": "web_search"}],
        "metadata": {"file_id": "file-8", "prompt": "x"},
    }
    passes("responses", body)


# -- chat -----------------------------------------------------------------------------------


def test_chat_file_ids_and_stored_audio_are_refused():
    body = {"model": "m", "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "read"},
                                     {"type": "file", "file": {"file_id": "file-1"}}]}]}
    assert refused("chat", body) == "messages[1].content[1].file.file_id"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"},
                                       {"role": "assistant", "audio": {"id": "audio_1"}}]}
    assert refused("chat", body) == "messages[1].audio.id"


def test_chat_inline_files_and_look_alikes_pass():
    passes("chat", {"model": "m", "messages": [
        {"role": "user", "content": [{"type": "file", "file": {"file_data": "data:application/pdf;base64,AA",
                                                               "filename": "a.pdf"}},
                                     {"type": "text", "text": "file_id file-1"}]},
        {"role": "tool", "tool_call_id": "c", "content": '{"file_id": "file-2"}'}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"file": {"type": "object", "properties": {"file_id": {}}}}}}}]})


# -- messages -------------------------------------------------------------------------------

MESSAGES_REFUSED = [
    ({"container": "container_1"}, "container"),
    ({"container": {"skills": [{"type": "custom", "skill_id": "skill_1"}]}}, "container"),
    ({"messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "file", "file_id": "file_1"}}]}]}, "messages[0].content[0].source.file_id"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image", "source": {"type": "file", "file_id": "file_2"}}]}]},
     "messages[2].content[1].source.file_id"),
    ({"messages": [{"role": "user", "content": [{"type": "container_upload", "file_id": "file_3"}]}]},
     "messages[0].content[0].file_id"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "image", "source": {"file_id": "file_4"}}]}]}]}, "messages[0].content[0].content[0].source.file_id"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "content", "content": [
        {"type": "image", "source": {"type": "file", "file_id": "file_5"}}]}}]}]},
     "messages[0].content[0].source.content[0].source.file_id"),
]


@pytest.mark.parametrize("extra,param", MESSAGES_REFUSED)
def test_messages_stored_objects_are_refused_naming_the_field(extra, param):
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], **extra}
    assert refused("messages", body) == param


def test_messages_inline_sources_and_look_alikes_pass():
    passes("messages", {"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": [
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AA"}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "file_id"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "tool_result", "tool_use_id": "t", "content": "container_upload file_id"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "f",
                                           "input": {"container": "c", "file_id": "f"}}]}],
        "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"container": {}}}}],
        "metadata": {"user_id": "u"}})


def test_other_formats_and_odd_shapes_do_not_raise():
    passes("embeddings", {"model": "m", "input": "x", "file_id": "f"})
    passes("chat", {"model": "m", "messages": "not a list"})
    passes("messages", {"model": "m", "messages": [1, {"role": "user", "content": [None, 2]}]})
    passes("responses", {"model": "m", "input": [None, 3, {"content": "text"}], "tools": "x"})


# -- response ids ---------------------------------------------------------------------------


def test_asked_response_ids_reads_both_fields_and_both_conversation_shapes():
    assert asked_response_ids({"input": "x"}) == []
    assert asked_response_ids({"previous_response_id": "resp_1", "conversation": "conv_1"}) == [
        ("previous_response_id", "resp_1"), ("conversation", "conv_1")]
    assert asked_response_ids({"conversation": {"id": "conv_2"}}) == [("conversation.id", "conv_2")]
    # ids on input items are not previous_response_id
    assert asked_response_ids({"input": [{"type": "message", "id": "msg_1", "role": "user", "content": "x"}]}) == []


@pytest.mark.parametrize("body,param", [
    ({"previous_response_id": 12}, "previous_response_id"),
    ({"conversation": {"name": "x"}}, "conversation.id"),
    ({"conversation": ["conv_1"]}, "conversation"),
])
def test_asked_response_ids_of_the_wrong_type_are_the_clients_400(body, param):
    with pytest.raises(TranslationError) as caught:
        asked_response_ids(body)
    assert caught.value.param == param


def test_answer_received_ids():
    assert answer_received_ids({"id": "resp_1", "object": "response"}) == ("resp_1",)
    assert answer_received_ids({"id": "resp_1", "conversation": {"id": "conv_1"}}) == ("resp_1", "conv_1")
    assert answer_received_ids({"id": "x" * 300}) == ()
    assert answer_received_ids(None) == () == answer_received_ids({"id": 5, "conversation": "conv_1"})
