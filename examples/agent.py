"""A minimal agent: the only memplane-specific thing is the base URL and the token.

    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=<agent-id>:<secret> python examples/agent.py
"""

import os
import sys

from openai import OpenAI

client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
model = os.environ.get("MODEL", "gpt-4o-mini")
question = " ".join(sys.argv[1:]) or "What do you remember about me?"
reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}])
print(reply.choices[0].message.content)
