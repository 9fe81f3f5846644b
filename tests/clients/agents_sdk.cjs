// One run of an OpenAI Agents SDK (JavaScript) agent with one function tool, as an app would write it.
// Used by tests/test_coding_clis_unseen_2.py through memplane: OPENAI_BASE_URL and OPENAI_API_KEY
// point the SDK's default client at the proxy (the openai package reads them).
//
//   node agents_sdk.cjs --api responses|chat_completions [--stream] [--subagent] --model MODEL "what the person says"
//
// --subagent: the agent's one tool is another agent (`reader.asTool()`, named `Agent`) that has the
// read_file tool: the model hands it a task in words of its own.
//
// `@openai/agents` is found through NODE_PATH (the pinned install under ~/.cache/memplane/npm-clis).
// Prints the run's final output; exits 1 with the error otherwise.
'use strict';

const fs = require('node:fs');
const { Agent, run, tool, setOpenAIAPI, setTracingDisabled } = require('@openai/agents');

function parse(argv) {
  const out = { api: 'responses', stream: false, subagent: false, model: 'gpt-4.1', input: '' };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--api') out.api = argv[++i];
    else if (argv[i] === '--stream') out.stream = true;
    else if (argv[i] === '--subagent') out.subagent = true;
    else if (argv[i] === '--model') out.model = argv[++i];
    else out.input = argv[i];
  }
  return out;
}

const readFile = tool({
  name: 'read_file',
  description: 'Read a text file and return its content.',
  parameters: {
    type: 'object',
    properties: { file_path: { type: 'string', description: 'Absolute path of the file' } },
    required: ['file_path'],
    additionalProperties: false,
  },
  strict: true,
  execute: async ({ file_path }) => fs.readFileSync(file_path, 'utf8'),
});

async function main() {
  const args = parse(process.argv.slice(2));
  setTracingDisabled(true); // no trace export to the vendor
  setOpenAIAPI(args.api);
  let tools = [readFile];
  if (args.subagent) {
    const reader = new Agent({
      name: 'Reader',
      instructions: 'You read the files you are asked about with read_file and report what they do.',
      model: args.model,
      tools: [readFile],
    });
    tools = [reader.asTool({ toolName: 'Agent', toolDescription: 'Hand a task to a subagent that reads files.' })];
  }
  const agent = new Agent({
    name: 'Assistant',
    instructions: 'You are a helpful assistant. Read the files the user names with read_file, then answer briefly.',
    model: args.model,
    tools,
  });
  if (args.stream) {
    const result = await run(agent, args.input, { stream: true });
    for await (const _event of result) { /* the events arrive as the model streams */ }
    await result.completed;
    process.stdout.write(String(result.finalOutput ?? '') + '\n');
  } else {
    const result = await run(agent, args.input);
    process.stdout.write(String(result.finalOutput ?? '') + '\n');
  }
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(1);
});
