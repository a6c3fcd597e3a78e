// The AI SDK's own chat client (AbstractChat + DefaultChatTransport, as useChat runs it)
// against a helix server. Prints one JSON line per event, for tests/test_ai_sdk.py.
//
//   node chat.mjs send   BASE_URL TOKEN CHAT_ID TEXT [approve|deny|client]
//   node chat.mjs resume BASE_URL TOKEN CHAT_ID
//
// `send` sends TEXT like useChat's sendMessage; when the run asks for an approval it
// answers with addToolApprovalResponse and the chat sends the answer on its own
// (sendAutomaticallyWhen), as a useChat front end does; with `client` it runs the
// client-side tool `locate` in onToolCall (addToolOutput) and the chat sends its output
// on its own too. `resume` is a reloaded page:
// an empty chat with that id calls resumeStream() (useChat's `resume: true`).
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai";

const [command, baseUrl, token, chatId, text, answer] = process.argv.slice(2);
const print = (event) => process.stdout.write(JSON.stringify(event) + "\n");

class State {
  constructor() {
    this.messages = [];
    this._status = "ready";
    this.error = undefined;
  }
  get status() {
    return this._status;
  }
  set status(value) {
    if (value !== this._status) print({ event: "status", status: value });
    this._status = value;
  }
  pushMessage(message) {
    this.messages = [...this.messages, message];
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = this.messages.map((m, i) => (i === index ? message : m));
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

const finishes = [];
const chat = new AbstractChat({
  id: chatId,
  state: new State(),
  transport: new DefaultChatTransport({
    api: `${baseUrl}/ai-sdk/chat`,
    headers: { Authorization: `Bearer ${token}` },
  }),
  sendAutomaticallyWhen: (options) =>
    lastAssistantMessageIsCompleteWithApprovalResponses(options) ||
    (answer === "client" && lastAssistantMessageIsCompleteWithToolCalls(options)),
  onToolCall: ({ toolCall }) => {
    print({ event: "tool-call", toolName: toolCall.toolName, input: toolCall.input });
    if (answer === "client" && toolCall.toolName === "locate") {
      // Not awaited inside onToolCall (the chat's own advice): it queues behind this job.
      void chat.addToolOutput({
        tool: "locate",
        toolCallId: toolCall.toolCallId,
        output: { place: `the desk of ${toolCall.input.who}` },
      });
    }
  },
  onFinish: ({ finishReason, isError, isDisconnect }) => {
    finishes.push(finishReason);
    print({ event: "finish", finishReason, isError, isDisconnect });
  },
  onError: (error) => print({ event: "error", message: String(error.message ?? error) }),
  onData: (part) => print({ event: "data", type: part.type, data: part.data }),
});

const idle = async () => {
  while (chat.status === "submitted" || chat.status === "streaming") {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
};

if (command === "send") {
  await chat.sendMessage({ text });
  await idle();
  if (answer === "client") {
    while (finishes.length < 2) await new Promise((resolve) => setTimeout(resolve, 20));
    await idle();
  }
  const last = chat.messages.at(-1);
  const asked = (last?.parts ?? []).filter((p) => p.state === "approval-requested");
  for (const part of asked) {
    print({ event: "approval-requested", toolCallId: part.toolCallId, approvalId: part.approval.id });
  }
  if ((answer === "approve" || answer === "deny") && asked.length > 0) {
    const before = finishes.length;
    for (const part of asked) {
      await chat.addToolApprovalResponse({ id: part.approval.id, approved: answer === "approve" });
    }
    // The chat sends the answers on its own (sendAutomaticallyWhen): wait for that response.
    while (finishes.length === before) await new Promise((resolve) => setTimeout(resolve, 20));
    await idle();
  }
} else if (command === "resume") {
  await chat.resumeStream();
  await idle();
} else {
  throw new Error(`unknown command ${command}`);
}
print({ event: "messages", messages: chat.messages, finishes, status: chat.status });
