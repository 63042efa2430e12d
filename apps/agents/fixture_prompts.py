"""The fixture prompts every tenant gets: the ones the MCP conformance suite asks for by name
(`prompts-get-simple`, `prompts-get-with-args`, `prompts-get-embedded-resource`,
`prompts-get-with-image`, `completion-complete`). Seeded by `prompt_fixtures_seed`."""

from __future__ import annotations

from typing import Any

# A 1x1 red PNG: the smallest real image the image scenario can decode.
_RED_PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="


def _user_text(text: str) -> dict[str, Any]:
    return {"role": "user", "content": {"type": "text", "text": text}}


FIXTURE_PROMPTS: dict[str, dict[str, Any]] = {
    "test_simple_prompt": {
        "title": "Simple prompt",
        "description": "A simple prompt without arguments.",
        "arguments": [],
        "messages": [_user_text("This is a simple prompt for testing.")],
    },
    "test_prompt_with_arguments": {
        "title": "Prompt with arguments",
        "description": "A prompt with two required arguments, both completable.",
        "arguments": [
            {
                "name": "arg1",
                "description": "First test argument",
                "required": True,
                "values": ["paris", "park", "party", "test", "testValue1", "testing"],
            },
            {
                "name": "arg2",
                "description": "Second test argument",
                "required": True,
                "values": ["hello", "world", "testValue2"],
            },
        ],
        "messages": [_user_text("Prompt with arguments: arg1='{{arg1}}', arg2='{{arg2}}'")],
    },
    "test_prompt_with_embedded_resource": {
        "title": "Prompt with an embedded resource",
        "description": "A prompt embedding the resource named by resourceUri.",
        "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": True}],
        "messages": [
            {
                "role": "user",
                "content": {
                    "type": "resource",
                    "resource": {
                        "uri": "{{resourceUri}}",
                        "mimeType": "text/plain",
                        "text": "Embedded resource content for testing.",
                    },
                },
            },
            _user_text("Please process the embedded resource above."),
        ],
    },
    "test_input_required_result_prompt": {
        "title": "Prompt that asks for its context",
        "description": "Its required argument, when left out, is asked for by elicitation (MRTR).",
        "arguments": [{"name": "context", "description": "What context should the prompt use?", "required": True}],
        "messages": [_user_text("Answer with this context in mind: {{context}}")],
    },
    "test_prompt_with_image": {
        "title": "Prompt with an image",
        "description": "A prompt carrying a PNG image.",
        "arguments": [],
        "messages": [
            {"role": "user", "content": {"type": "image", "data": _RED_PIXEL_PNG, "mimeType": "image/png"}},
            _user_text("Please analyze the image above."),
        ],
    },
}
