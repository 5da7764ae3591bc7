#!/usr/bin/env python3
"""specd serve's structured output through the clients people use, installed from PyPI: the
`openai` client's client.beta.chat.completions.parse with a Pydantic model, and langchain-openai's
ChatOpenAI(...).with_structured_output(Model) and .bind_tools([...]) (a tool call, then the
call and the tool's answer sent back).

The clients live in a virtual environment under the build directory (BUILD_DIR/pyclients-venv),
made and filled with pip on the first run and reused after. Without pip, venv or the network the
test is skipped (exit 77).

usage: test_serve_pypi_clients.py BUILD_DIR MODEL
"""
import os
import subprocess
import sys

BIN, MODEL = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(BIN, "pyclients-venv")
PY = os.path.join(VENV, "bin", "python")
PACKAGES = ["openai", "langchain-openai", "pydantic"]


def skip(why):
    print("SKIP:", why, flush=True)
    sys.exit(77)


def ensure_clients():
    check = [PY, "-c", "import openai, langchain_openai, pydantic"]
    if os.path.exists(PY) and subprocess.run(check, capture_output=True).returncode == 0:
        return
    r = subprocess.run([sys.executable, "-m", "venv", VENV], capture_output=True, text=True)
    if r.returncode != 0:
        skip("no venv: %s" % r.stderr.strip()[-300:])
    r = subprocess.run([PY, "-m", "pip", "install", "-q", "--disable-pip-version-check"] +
                       PACKAGES, capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or subprocess.run(check, capture_output=True).returncode != 0:
        skip("pip could not install %s: %s" % (PACKAGES, r.stderr.strip()[-300:]))


CLIENT = r'''
import enum, json, sys
sys.path.insert(0, sys.argv[3])
from serve_fixture import check, start_serve, stop_serve
import openai, pydantic
from langchain_openai import ChatOpenAI
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

class Role(str, enum.Enum):
    admin = "admin"
    user = "user"
    guest = "guest"

class Person(pydantic.BaseModel):
    name: str
    age: int
    role: Role

@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return "18 degrees celsius, sunny"

srv, port = start_serve(sys.argv[1], sys.argv[2], ["-t", "2", "--policy", "ngram"])
try:
    base = "http://127.0.0.1:%d/v1" % port
    client = openai.OpenAI(base_url=base, api_key="none")
    model = client.models.list().data[0].id
    done = client.beta.chat.completions.parse(
        model=model, response_format=Person, temperature=0, max_tokens=96,
        messages=[{"role": "user", "content": "Alice is a 31 year old admin. Extract her."}])
    p = done.choices[0].message.parsed
    check(isinstance(p, Person) and isinstance(p.age, int), "parse gave %r" % (p,))
    print("ok: openai parse ->", p, flush=True)

    llm = ChatOpenAI(base_url=base, api_key="none", model=model, temperature=0, max_tokens=96)
    p = llm.with_structured_output(Person).invoke("Bob is a 40 year old guest. Extract him.")
    check(isinstance(p, Person), "with_structured_output gave %r" % (p,))
    print("ok: langchain with_structured_output ->", p, flush=True)

    bound = llm.bind_tools([get_weather], tool_choice="get_weather")
    q = HumanMessage("What is the weather in Paris?")
    ai = bound.invoke([q])
    check(len(ai.tool_calls) == 1 and ai.tool_calls[0]["name"] == "get_weather" and
          isinstance(ai.tool_calls[0]["args"].get("city"), str), "bind_tools: %r" % ai)
    answer = get_weather.invoke(ai.tool_calls[0]["args"])
    back = ChatOpenAI(base_url=base, api_key="none", model=model, temperature=0,
                      max_tokens=32).bind_tools([get_weather])
    final = back.invoke([q, ai, ToolMessage(answer, tool_call_id=ai.tool_calls[0]["id"])])
    check(final.content or final.tool_calls, "the round trip gave nothing: %r" % final)
    print("ok: langchain bind_tools ->", ai.tool_calls[0], "then", repr(final.content)[:80],
          flush=True)
finally:
    stop_serve(srv)
print("test_serve_pypi_clients: all passed")
'''


def main():
    try:
        ensure_clients()
    except (OSError, subprocess.TimeoutExpired) as e:
        skip("cannot install the clients: %s" % e)
    r = subprocess.run([PY, "-c", CLIENT, os.path.join(BIN, "specd"), MODEL, HERE])
    sys.exit(r.returncode)


main()
