// Drives helix's POST /ag-ui/{agent} with AG-UI's own client (@ag-ui/client's HttpAgent)
// and prints what it received as JSON lines, for tests/test_ag_ui.py to assert on.
//
// argv[2] is a JSON plan: {url, token, threadId, steps: [step...]}; each step is one
// runAgent call: {runId, message?, tools?, resume?: [{status, payload}] (answers the
// agent's pending interrupts in order), abortOn?: {type, toolCallName?} (abort the first
// attempt there, then write releaseFile and send the same input again), retry?: true
// (send the same input again after an error, e.g. while the server is relaunched),
// headers?: {...} (e.g. Last-Event-ID), toolResult?: "..." (answers the first pending
// interrupt with a tool message instead)}.
import { writeFileSync } from "node:fs";
import { HttpAgent } from "@ag-ui/client";

const plan = JSON.parse(process.argv[2]);
const out = (line) => process.stdout.write(JSON.stringify(line) + "\n");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// A server killed mid-stream fails the run (caught below); the client's reader then
// rejects once more while cancelling the dead body, outside any promise we hold.
process.on("unhandledRejection", (error) => out({ unhandled: String(error?.message ?? error) }));
let messages = [];
let pending = [];

function agentWith(history, headers) {
  const agent = new HttpAgent({
    url: plan.url,
    headers: { Authorization: `Bearer ${plan.token}`, ...headers },
    threadId: plan.threadId,
    initialMessages: history,
  });
  agent.pendingInterrupts = pending;
  return agent;
}

async function attempt(step, n, history) {
  const agent = agentWith(history, step.headers ?? {});
  let aborted = false;
  const resume = step.resume?.map((answer, i) => ({ interruptId: pending[i]?.id, ...answer }));
  out({ step: step.runId, attempt: n });
  let finished = null;
  await agent.runAgent(
    { runId: step.runId, tools: step.tools ?? [], ...(resume ? { resume } : {}) },
    {
      onEvent({ event }) {
        out({ event });
        const stop = step.abortOn;
        if (n === 1 && stop && event.type === stop.type &&
            (!stop.toolCallName || event.toolCallName === stop.toolCallName)) {
          aborted = true;
          agent.abortRun();
          if (step.releaseFile) writeFileSync(step.releaseFile, "go");
        }
      },
      onRunFinishedEvent({ event }) {
        finished = event;
      },
    },
  );
  return { agent, aborted, finished };
}

for (const step of plan.steps) {
  if (step.message) {
    messages = [...messages, { id: `u-${step.runId}`, role: "user", content: step.message }];
  }
  if (step.toolResult !== undefined) {
    // AG-UI's front-end tool convention instead of `resume`: the result as a tool message.
    const answer = { id: `t-${step.runId}`, role: "tool", toolCallId: pending[0].id,
                     content: step.toolResult };
    messages = [...messages, answer];
    pending = [];
  }
  const history = messages;
  for (let n = 1; ; n++) {
    try {
      const { agent, aborted, finished } = await attempt(step, n, history);
      if (aborted) continue; // reconnect: the same input again
      messages = agent.messages;
      pending = finished?.outcome?.type === "interrupt" ? finished.outcome.interrupts : [];
      out({ done: step.runId, outcome: finished?.outcome ?? null, pending: pending.map((p) => p.id),
            messages, state: agent.state });
      break;
    } catch (error) {
      out({ error: String(error?.message ?? error), status: error?.status ?? null });
      if (!step.retry || n > 400) break;
      await sleep(250);
    }
  }
}
