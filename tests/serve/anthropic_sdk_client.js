// The official Anthropic SDK (npm `@anthropic-ai/sdk`) against a running `loom serve`,
// unchanged. Each reply is compared with the Chat Completions reply for the same
// conversation at temperature 0 (fetched directly), streamed with non-streamed.
// Usage: node anthropic_sdk_client.js PORT MODEL MODE   (MODE: plain | tools | thinking)
// Exits non-zero with the failed check on stderr.
const assert = require("assert");
const Anthropic = require("@anthropic-ai/sdk");

const [port, model, mode] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const key = "sdk-key";

async function chat(body) {
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, temperature: 0, ...body }),
  });
  const text = await r.text();
  assert.strictEqual(r.status, 200, text);
  return JSON.parse(text);
}

function textOf(message) {
  return message.content.filter((b) => b.type === "text").map((b) => b.text).join("");
}

// The raw event stream: its types in order and the message it adds up to (the SDK's own accumulation).
async function streamed(client, params) {
  const types = [];
  const stream = client.messages.stream(params);
  stream.on("streamEvent", (e) => types.push(e.type));
  const message = await stream.finalMessage();
  return { types, message };
}

function checkEventOrder(types) {
  assert.strictEqual(types[0], "message_start");
  assert.strictEqual(types[types.length - 1], "message_stop");
  assert.strictEqual(types[types.length - 2], "message_delta");
  let open = false;
  for (const t of types) {
    if (t === "content_block_start") { assert(!open, types.join()); open = true; }
    if (t === "content_block_delta") assert(open, types.join());
    if (t === "content_block_stop") { assert(open, types.join()); open = false; }
  }
  assert(!open);
}

async function plain(client) {
  const system = "You answer from the King James Bible.";
  const messages = [{ role: "user", content: "Who made the heavens?" }];
  const m = await client.messages.create({ model, max_tokens: 10, temperature: 0, system, messages });
  const c = await chat({ max_tokens: 10, messages: [{ role: "system", content: system }, ...messages] });
  assert.strictEqual(m.type, "message");
  assert.strictEqual(m.role, "assistant");
  assert(m.id.startsWith("msg_"));
  assert.strictEqual(textOf(m), c.choices[0].message.content);
  assert.strictEqual(m.stop_reason, c.choices[0].finish_reason === "length" ? "max_tokens" : "end_turn");
  assert.strictEqual(m.usage.input_tokens, c.usage.prompt_tokens);
  assert.strictEqual(m.usage.output_tokens, c.usage.completion_tokens);

  const s = await streamed(client, { model, max_tokens: 10, temperature: 0, system, messages });
  checkEventOrder(s.types);
  assert.deepStrictEqual(s.message.content, m.content);
  assert.strictEqual(s.message.stop_reason, m.stop_reason);
  assert.strictEqual(s.message.usage.output_tokens, m.usage.output_tokens);

  // Content blocks as the user's content, and a stop sequence from the reply itself.
  const blocks = [{ role: "user", content: [{ type: "text", text: "Who made the heavens?" }] }];
  const mb = await client.messages.create({ model, max_tokens: 10, temperature: 0, system, messages: blocks });
  assert.strictEqual(textOf(mb), textOf(m));
  const words = textOf(m).trim().split(/\s+/);
  if (words.length >= 2) {
    const stop = words[1];
    const ms = await client.messages.create({ model, max_tokens: 10, temperature: 0, system, messages, stop_sequences: [stop] });
    assert.strictEqual(ms.stop_reason, "stop_sequence");
    assert.strictEqual(ms.stop_sequence, stop);
    assert(!textOf(ms).includes(stop));
    const cs = await chat({ max_tokens: 10, stop: [stop], messages: [{ role: "system", content: system }, ...messages] });
    assert.strictEqual(textOf(ms), cs.choices[0].message.content);
  }

  const count = await client.messages.countTokens({ model, system, messages });
  assert.strictEqual(count.input_tokens, c.usage.prompt_tokens);

  // Errors in Anthropic's shape, as the SDK's typed errors.
  await assert.rejects(client.messages.create({ model, messages }), (e) =>
    e instanceof Anthropic.BadRequestError && e.error.type === "error" && e.error.error.type === "invalid_request_error" &&
    /max_tokens/.test(e.error.error.message));
  await assert.rejects(client.messages.create({ model: "nope", max_tokens: 4, messages }), (e) =>
    e instanceof Anthropic.NotFoundError && e.error.error.type === "not_found_error");
  const bad = new Anthropic({ baseURL: base, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model, max_tokens: 4, messages }), (e) =>
    e instanceof Anthropic.AuthenticationError && e.error.error.type === "authentication_error");
  // Bearer works too (authToken sends Authorization).
  const bearer = new Anthropic({ baseURL: base, apiKey: null, authToken: key, maxRetries: 0 });
  const mbear = await bearer.messages.create({ model, max_tokens: 10, temperature: 0, system, messages });
  assert.strictEqual(textOf(mbear), textOf(m));
}

const WEATHER = {
  name: "get_weather",
  description: "Current weather in a city",
  input_schema: {
    type: "object",
    properties: { city: { type: "string", maxLength: 8 }, unit: { enum: ["c", "f"] } },
    required: ["city", "unit"],
  },
};

async function tools(client) {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  const params = { model, max_tokens: 300, temperature: 0, messages, tools: [WEATHER], tool_choice: { type: "tool", name: "get_weather" } };
  const m = await client.messages.create(params);
  assert.strictEqual(m.stop_reason, "tool_use");
  const use = m.content.find((b) => b.type === "tool_use");
  assert(use, JSON.stringify(m.content));
  assert.strictEqual(use.name, "get_weather");
  assert(use.id.startsWith("toolu_"));
  assert.strictEqual(typeof use.input.city, "string");
  assert(["c", "f"].includes(use.input.unit));
  const c = await chat({
    max_tokens: 300, messages, tools: [{ type: "function", function: { name: WEATHER.name, description: WEATHER.description, parameters: WEATHER.input_schema } }],
    tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  assert.deepStrictEqual(use.input, JSON.parse(c.choices[0].message.tool_calls[0].function.arguments));

  const s = await streamed(client, params);
  checkEventOrder(s.types);
  const suse = s.message.content.find((b) => b.type === "tool_use");
  assert.deepStrictEqual(suse.input, use.input);
  assert.strictEqual(s.message.stop_reason, "tool_use");

  // The result goes back as a tool_result block; the reply equals chat's with a tool message.
  const followup = [
    ...messages,
    { role: "assistant", content: [{ type: "tool_use", id: use.id, name: use.name, input: use.input }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "Sunny, 21 C" }] },
  ];
  const m2 = await client.messages.create({ model, max_tokens: 12, temperature: 0, messages: followup, tools: [WEATHER] });
  const c2 = await chat({
    max_tokens: 12,
    tools: [{ type: "function", function: { name: WEATHER.name, description: WEATHER.description, parameters: WEATHER.input_schema } }],
    messages: [
      ...messages,
      { role: "assistant", content: null, tool_calls: [{ id: use.id, type: "function", function: { name: use.name, arguments: JSON.stringify(use.input) } }] },
      { role: "tool", tool_call_id: use.id, content: "Sunny, 21 C" },
    ],
  });
  assert.strictEqual(textOf(m2), c2.choices[0].message.content ?? "");
  const count = await client.messages.countTokens({ model, messages: followup, tools: [WEATHER] });
  assert.strictEqual(count.input_tokens, c2.usage.prompt_tokens);
}

async function thinking(client) {
  const messages = [{ role: "user", content: "Who made the heavens?" }];
  const params = { model, max_tokens: 24, temperature: 0, messages, thinking: { type: "enabled", budget_tokens: 6 } };
  const m = await client.messages.create(params);
  assert.strictEqual(m.content[0].type, "thinking", JSON.stringify(m.content));
  assert(m.content[0].thinking.length > 0);
  const c = await chat({ max_tokens: 24, messages, max_thinking_tokens: 6 });
  assert.strictEqual(m.content[0].thinking, c.choices[0].message.reasoning_content);
  assert.strictEqual(textOf(m), c.choices[0].message.content);
  assert(textOf(m).length > 0, "the budget closed the thinking and an answer followed");
  const s = await streamed(client, params);
  checkEventOrder(s.types);
  assert.deepStrictEqual(s.message.content, m.content);
}

async function main() {
  const client = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 60000 });
  if (mode === "plain") await plain(client);
  else if (mode === "tools") await tools(client);
  else if (mode === "thinking") await thinking(client);
  else throw new Error(`unknown mode ${mode}`);
  console.log(`anthropic sdk (${mode}): all checks passed`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
