// The official OpenAI SDK (npm `openai`) against a running `loom serve`, unchanged:
// models.list, completions and chat completions, plain and streamed. Exits non-zero
// with the failed check on stderr. Usage: node openai_sdk_client.js PORT MODEL
const assert = require("assert");
const OpenAI = require("openai");

async function main() {
  const [port, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "sdk-key", maxRetries: 0, timeout: 60000 });

  const models = await client.models.list();
  assert.deepStrictEqual(models.data.map((m) => m.id), [model]);

  const c = await client.completions.create({ model, prompt: "In the beginning", max_tokens: 12, temperature: 0 });
  assert.strictEqual(c.object, "text_completion");
  assert.strictEqual(c.choices.length, 1);
  assert.strictEqual(c.usage.completion_tokens, 12);

  let streamed = "";
  const cs = await client.completions.create({ model, prompt: "In the beginning", max_tokens: 12, temperature: 0, stream: true });
  for await (const chunk of cs) streamed += chunk.choices[0]?.text ?? "";
  assert.strictEqual(streamed, c.choices[0].text);

  const messages = [{ role: "user", content: "Who made the heavens?" }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 2 });
  assert.strictEqual(chat.choices[0].message.role, "assistant");
  assert.strictEqual(chat.choices[0].logprobs.content.length, chat.usage.completion_tokens);

  let content = "";
  let usage = null;
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    content += chunk.choices[0]?.delta?.content ?? "";
  }
  assert.strictEqual(content, chat.choices[0].message.content);
  assert.strictEqual(usage.completion_tokens, chat.usage.completion_tokens);

  // Errors surface as the SDK's typed errors with OpenAI's fields.
  await assert.rejects(client.completions.create({ model: "nope", prompt: "x" }), (e) => e.status === 404 && e.code === "model_not_found");
  await assert.rejects(client.completions.create({ model, prompt: "x", temperature: 9 }), (e) => e.status === 400 && e.param === "temperature");
  const bad = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
  console.log("openai sdk: all checks passed");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
