"""A human request fitted to the server's limits, whatever an agent asks with: shared by
the adapters that turn a framework's own questions into requests (LangGraph's
``interrupt``, the Agent Framework's ``request_info``)."""

# The server's limits on a request (runs/services/requests.py).
PROMPT_CHARS, CONTEXT_CHARS, CHOICES_MAX, CHOICE_CHARS = 4000, 20_000, 20, 200


def within_limits(asked: dict, asker: str) -> dict:
    """The keyword arguments of ``Oversight.ask`` in ``asked``, as the server takes them:
    a long prompt goes to the context, a long context is cut, and choices the server
    cannot offer become a question, listed in the context and answered in words.
    ``asker`` (say "The agent's graph") names who asks when the prompt must be
    replaced."""
    prompt, context = asked["prompt"].strip(), asked.get("context", "")
    if len(prompt) > PROMPT_CHARS:
        prompt, context = f"{asker} asks (in full below):", f"{prompt}\n\n{context}"
    choices = asked.get("choices")
    if choices is not None:
        offered = list(dict.fromkeys(choices))  # the answer is one of them, as given
        if 1 <= len(offered) <= CHOICES_MAX and all(
            choice.strip() and len(choice) <= CHOICE_CHARS for choice in offered
        ):
            asked |= {"choices": offered}
        else:  # the server would refuse them: an answer in words, the choices listed
            listed = "\n".join(f"- {choice}" for choice in choices)
            context = f"{context}\n\nChoices:\n{listed}"
            asked = {k: v for k, v in asked.items() if k != "choices"} | {"kind": "question"}
    if len(context) > CONTEXT_CHARS:
        cut = f"\n\n(cut: {len(context) - CONTEXT_CHARS + 100} more characters)"
        context = context[: CONTEXT_CHARS - 100] + cut
    asked = {key: value for key, value in asked.items() if key != "context"}
    asked["prompt"] = prompt or f"{asker} waits for your answer."
    return asked | ({"context": context} if context else {})
