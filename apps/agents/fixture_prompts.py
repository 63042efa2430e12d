"""The fixture prompts every tenant gets: the ones the MCP conformance suite asks for by name
(`prompts-get-simple`, `prompts-get-with-args`, `prompts-get-embedded-resource`,
`prompts-get-with-image`, `completion-complete`). Seeded by `prompt_fixtures_seed`."""

from __future__ import annotations

from typing import Any

# A 1x1 red PNG: the smallest real image the image scenario can decode.
_RED_PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="


def _user_text(text: str) -> dict[str, Any]:
    return {"role": "user", "content": {"type": "text", "text": text}}


def _prompt(title: str, description: str, *messages: dict[str, Any], arguments: tuple[Any, ...] = ()) -> dict[str, Any]:
    return {"title": title, "description": description, "arguments": list(arguments), "messages": list(messages)}


def _required(name: str, description: str, *values: str) -> dict[str, Any]:
    """A required argument; `values` are the completions offered for it."""
    argument: dict[str, Any] = {"name": name, "description": description, "required": True}
    return {**argument, "values": list(values)} if values else argument


FIXTURE_PROMPTS: dict[str, dict[str, Any]] = {
    "test_simple_prompt": _prompt(
        "Simple prompt", "A simple prompt without arguments.", _user_text("This is a simple prompt for testing.")
    ),
    "test_prompt_with_arguments": _prompt(
        "Prompt with arguments",
        "A prompt with two required arguments, both completable.",
        _user_text("Prompt with arguments: arg1='{{arg1}}', arg2='{{arg2}}'"),
        arguments=(
            _required("arg1", "First test argument", "paris", "park", "party", "test", "testValue1", "testing"),
            _required("arg2", "Second test argument", "hello", "world", "testValue2"),
        ),
    ),
    "test_prompt_with_embedded_resource": _prompt(
        "Prompt with an embedded resource",
        "A prompt embedding the resource named by resourceUri.",
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
        arguments=(_required("resourceUri", "URI of the resource to embed"),),
    ),
    "test_input_required_result_prompt": _prompt(
        "Prompt that asks for its context",
        "Its required argument, when left out, is asked for by elicitation (MRTR).",
        _user_text("Answer with this context in mind: {{context}}"),
        arguments=(_required("context", "What context should the prompt use?"),),
    ),
    "test_prompt_with_image": _prompt(
        "Prompt with an image",
        "A prompt carrying a PNG image.",
        {"role": "user", "content": {"type": "image", "data": _RED_PIXEL_PNG, "mimeType": "image/png"}},
        _user_text("Please analyze the image above."),
    ),
}
