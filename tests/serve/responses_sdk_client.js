// The official OpenAI SDK's Responses API (npm `openai`, responses.create) against a
// running `loom serve`, unchanged: replies equal the Chat Completions reply for the same
// conversation at temperature 0, streamed equal non-streamed, previous_response_id.
// Usage: node responses_sdk_client.js PORT MODEL MODE   (MODE: plain | tools | thinking)
const assert = require("assert");
const OpenAI = require("openai");

const [port, model, mode] = process.argv.slice(2);

async function collect(stream) {
  const types = [];
  let text = "";
  let reasoning = "";
  const args = {};
  let final = null;
  for await (const e of stream) {
    types.push(e.type);
    if (e.type === "response.output_text.delta") text += e.delta;
    if (e.type === "response.reasoning_text.delta") reasoning += e.delta;
    if (e.type === "response.function_call_arguments.delta") args[e.item_id] = (args[e.item_id] ?? "") + e.delta;
    if (e.type === "response.completed" || e.type === "response.incomplete") final = e.response;
  }
  return { types, text, reasoning, args, final };
}

function checkOrder(types) {
  assert.strictEqual(types[0], "response.created");
  assert.strictEqual(types[1], "response.in_progress");
  assert(["response.completed", "response.incomplete"].includes(types[types.length - 1]));
  assert.strictEqual(types.filter((t) => t === "response.output_item.added").length, types.filter((t) => t === "response.output_item.done").length);
}

function outputText(r) {
  return r.output.filter((i) => i.type === "message").flatMap((i) => i.content).filter((p) => p.type === "output_text").map((p) => p.text).join("");
}

async function plain(client) {
  const instructions = "You answer from the King James Bible.";
  const r = await client.responses.create({ model, instructions, input: "Who made the heavens?", max_output_tokens: 10, temperature: 0 });
  const c = await client.chat.completions.create({
    model, max_tokens: 10, temperature: 0,
    messages: [{ role: "system", content: instructions }, { role: "user", content: "Who made the heavens?" }],
  });
  assert.strictEqual(r.object, "response");
  assert(r.id.startsWith("resp_"));
  assert.strictEqual(r.output_text, c.choices[0].message.content);
  assert.strictEqual(r.usage.input_tokens, c.usage.prompt_tokens);
  assert.strictEqual(r.usage.output_tokens, c.usage.completion_tokens);
  assert.strictEqual(r.status, c.choices[0].finish_reason === "length" ? "incomplete" : "completed");
  assert.strictEqual(r.store, false);

  const s = await collect(await client.responses.create({ model, instructions, input: "Who made the heavens?", max_output_tokens: 10, temperature: 0, stream: true }));
  checkOrder(s.types);
  for (const t of ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
    "response.output_text.done", "response.content_part.done", "response.output_item.done"])
    assert(s.types.includes(t), `${t} missing: ${s.types.join()}`);
  assert.strictEqual(s.text, r.output_text);
  assert.strictEqual(outputText(s.final), r.output_text);
  assert.deepStrictEqual(s.final.usage, r.usage);

  // Items as input, then previous_response_id (with store) continues the same conversation.
  const items = [{ role: "user", content: [{ type: "input_text", text: "Who made the heavens?" }] }];
  const ri = await client.responses.create({ model, instructions, input: items, max_output_tokens: 10, temperature: 0, store: true });
  assert.strictEqual(ri.output_text, r.output_text);
  const next = await client.responses.create({ model, previous_response_id: ri.id, input: "And the earth?", max_output_tokens: 8, temperature: 0 });
  const c2 = await client.chat.completions.create({
    model, max_tokens: 8, temperature: 0,
    messages: [{ role: "user", content: "Who made the heavens?" }, { role: "assistant", content: ri.output_text }, { role: "user", content: "And the earth?" }],
  });
  assert.strictEqual(next.output_text, c2.choices[0].message.content);
  await assert.rejects(client.responses.create({ model, previous_response_id: r.id, input: "x" }), (e) => e.status === 404 && e.param === "previous_response_id");

  // Structured output through text.format.
  const schema = { type: "object", properties: { book: { enum: ["Genesis", "Exodus"] }, chapter: { type: "integer", minimum: 1, maximum: 50 } }, required: ["book", "chapter"], additionalProperties: false };
  const rj = await client.responses.create({ model, input: "Name a book.", max_output_tokens: 80, temperature: 0, text: { format: { type: "json_schema", name: "ref", schema, strict: true } } });
  const parsed = JSON.parse(rj.output_text);
  assert(["Genesis", "Exodus"].includes(parsed.book));
  const cj = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Name a book." }], max_tokens: 80, temperature: 0, response_format: { type: "json_schema", json_schema: { name: "ref", schema, strict: true } } });
  assert.strictEqual(rj.output_text, cj.choices[0].message.content);

  await assert.rejects(client.responses.create({ model, input: "x", max_output_tokens: 0 }), (e) => e.status === 400 && e.param === "max_output_tokens");
  await assert.rejects(client.responses.create({ model, input: [{ type: "item_reference", id: "x" }] }), (e) => e.status === 400 && e.param === "input[0].type");
}

const WEATHER = {
  type: "function", name: "get_weather", description: "Current weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 }, unit: { enum: ["c", "f"] } }, required: ["city", "unit"] },
};

async function tools(client) {
  const input = "What is the weather in Paris?";
  const params = { model, input, max_output_tokens: 300, temperature: 0, tools: [WEATHER], tool_choice: { type: "function", name: "get_weather" } };
  const r = await client.responses.create(params);
  const call = r.output.find((i) => i.type === "function_call");
  assert(call, JSON.stringify(r.output));
  assert.strictEqual(call.name, "get_weather");
  const args = JSON.parse(call.arguments);
  const c = await client.chat.completions.create({
    model, max_tokens: 300, temperature: 0, messages: [{ role: "user", content: input }],
    tools: [{ type: "function", function: { name: WEATHER.name, description: WEATHER.description, parameters: WEATHER.parameters } }],
    tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  assert.strictEqual(call.arguments, c.choices[0].message.tool_calls[0].function.arguments);
  const s = await collect(await client.responses.create({ ...params, stream: true }));
  checkOrder(s.types);
  assert(s.types.includes("response.function_call_arguments.done"));
  const scall = s.final.output.find((i) => i.type === "function_call");
  assert.deepStrictEqual(JSON.parse(scall.arguments), args);
  assert.strictEqual(s.args[scall.id], scall.arguments);

  // The call's output goes back as items; the reply equals chat's with a tool message.
  const r2 = await client.responses.create({
    model, max_output_tokens: 12, temperature: 0, tools: [WEATHER],
    input: [{ role: "user", content: input }, { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: "function_call_output", call_id: call.call_id, output: "Sunny, 21 C" }],
  });
  const c2 = await client.chat.completions.create({
    model, max_tokens: 12, temperature: 0,
    tools: [{ type: "function", function: { name: WEATHER.name, description: WEATHER.description, parameters: WEATHER.parameters } }],
    messages: [{ role: "user", content: input },
      { role: "assistant", content: "", tool_calls: [{ id: call.call_id, type: "function", function: { name: call.name, arguments: call.arguments } }] },
      { role: "tool", tool_call_id: call.call_id, content: "Sunny, 21 C" }],
  });
  assert.strictEqual(r2.output_text, c2.choices[0].message.content ?? "");
}

async function thinking(client) {
  const input = "Who made the heavens?";
  const r = await client.responses.create({ model, input, max_output_tokens: 24, temperature: 0, reasoning: { effort: "minimal" } });
  // "minimal" is a budget of 0: the section the template opened is closed at once, and
  // an empty reasoning is no item at all.
  const reasoning = r.output.find((i) => i.type === "reasoning");
  const c = await client.chat.completions.create({ model, max_tokens: 24, temperature: 0, messages: [{ role: "user", content: input }], reasoning_effort: "minimal" });
  assert.strictEqual(reasoning?.content[0].text ?? "", c.choices[0].message.reasoning_content);
  assert.strictEqual(r.output_text, c.choices[0].message.content);
  assert(r.output_text.length > 0, "the budget closed the thinking and an answer followed");
  const free = await client.responses.create({ model, input, max_output_tokens: 24, temperature: 0 });
  assert.strictEqual(free.output_text, "", "without a budget the tiny model never closes its thinking");
  assert(free.output.find((i) => i.type === "reasoning").content[0].text.length > 0);
  const s = await collect(await client.responses.create({ model, input, max_output_tokens: 24, temperature: 0, reasoning: { effort: "minimal" }, stream: true }));
  checkOrder(s.types);
  assert.strictEqual(s.reasoning, reasoning?.content[0].text ?? "");
  assert.deepStrictEqual(s.final.output.map((i) => i.type), r.output.map((i) => i.type));
  assert.strictEqual(s.text, r.output_text);
}

async function main() {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "sdk-key", maxRetries: 0, timeout: 60000 });
  if (mode === "plain") await plain(client);
  else if (mode === "tools") await tools(client);
  else if (mode === "thinking") await thinking(client);
  else throw new Error(`unknown mode ${mode}`);
  console.log(`openai responses (${mode}): all checks passed`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
