"""Counting what a cut-short stream produced, per format."""

from gatewayd.formats import partial


def test_chat_stream_text():
    datas = [
        b'{"choices":[{"delta":{"role":"assistant","content":""}}]}',
        b'{"choices":[{"delta":{"content":"Hel"}}]}',
        b'{"choices":[{"delta":{"reasoning_content":"hmm "}}]}',
        b'{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\\"a\\""}}]}}]}',
        b'not json',
        b'[]',
    ]
    assert partial.chat_stream_text(datas) == 'Helhmm f{"a"'


def test_messages_stream_text():
    datas = [
        b'{"type":"message_start","message":{"usage":{"input_tokens":3}}}',
        b'{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"so "}}',
        b'{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}',
        b'{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{}"}}',
    ]
    assert partial.messages_stream_text(datas) == "so Hi{}"


def test_responses_stream_text():
    datas = [
        b'{"type":"response.created","response":{}}',
        b'{"type":"response.output_text.delta","delta":"ab"}',
        b'{"type":"response.function_call_arguments.delta","delta":"{}"}',
    ]
    assert partial.responses_stream_text(datas) == "ab{}"


def test_message_text():
    message = {"content": [{"type": "thinking", "thinking": "t"}, {"type": "text", "text": "x"},
                           {"type": "tool_use", "input": {"a": 1}}, "junk"]}
    assert partial.message_text(message) == 't x{"a":1}'.replace(" ", "")
    assert partial.message_text(None) == ""


def test_shapes_that_cannot_be_read_are_skipped_not_raised():
    # the provider's events, forwarded untouched: any may have any shape
    datas = [
        b'{"choices":[{"delta":{"content":"one "}}]}',
        b'{"choices":5}', b'{"choices":[5]}', b'{"choices":[{"delta":5}]}',
        b'{"choices":[{"delta":{"tool_calls":5}}]}', b'{"choices":[{"delta":{"tool_calls":[5, {"function":5}]}}]}',
        b'{"choices":[{"delta":{"content":5,"tool_calls":[{"function":{"name":"f","arguments":7}}]}}]}',
        b'5', b'"text"',
    ]
    assert partial.chat_stream_text(datas) == "one f"
    assert partial.messages_stream_text([b'{"type":"content_block_delta","delta":5}',
                                         b'{"type":"content_block_delta","delta":{"text":5}}']) == ""
    assert partial.responses_stream_text([b'{"type":"response.output_text.delta","delta":[1]}']) == ""
