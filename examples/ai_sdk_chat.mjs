// A Vercel AI SDK chat driving a helix agent, approvals included: what `useChat` does in
// a browser, in Node with the `ai` package's own Chat (docs/protocols/ai-sdk.md).
//
//   .venv/bin/python examples/server.py          # the janitor, on port 8000
//   npm install ai && node examples/ai_sdk_chat.mjs
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from "ai";

// The chat's state: what @ai-sdk/react keeps in React state for useChat.
class State {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage = (m) => (this.messages = [...this.messages, m]);
  popMessage = () => (this.messages = this.messages.slice(0, -1));
  replaceMessage = (i, m) => (this.messages = this.messages.map((old, j) => (j === i ? m : old)));
  snapshot = (thing) => structuredClone(thing);
}

let finished = () => {};
const chat = new AbstractChat({
  id: `janitor-${Date.now()}`, // the chat id is the helix session id
  state: new State(),
  transport: new DefaultChatTransport({
    api: `${process.env.HELIX_URL ?? "http://127.0.0.1:8000"}/ai-sdk/chat`,
  }),
  // Once every approval is answered, the chat sends the answers on its own.
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onFinish: ({ finishReason }) => finished(finishReason),
});

await chat.sendMessage({ text: "clean up /tmp/helix-ai-sdk-demo.txt" });
for (const part of chat.lastMessage.parts) {
  if (part.state === "approval-requested") {
    console.log(`approving ${part.type} ${JSON.stringify(part.input)}`);
    const answered = new Promise((resolve) => (finished = resolve));
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
    console.log(`finish: ${await answered}`);
  }
}
const text = chat.lastMessage.parts.filter((p) => p.type === "text").map((p) => p.text);
console.log(text.join(""));
