import type { Redactor } from '@weir/redaction';
import type { EvalReport, EvalSide, GoldenPrompt } from './eval-types';
import { redactGoldenPromptForAudit, redactReport, WITHHELD_OUTPUT, WITHHELD_TEXT } from './redact-report';

const side = (output: string, error: EvalSide['error'] = null): EvalSide => ({ revision: 'r@1', output, error, ttft_ms: 1, total_ms: 2 });

function report(stable: EvalSide, candidate: EvalSide): EvalReport {
  return {
    scorer: { kind: 'exact', threshold: 1 },
    allowed_errors: 0,
    prompts: [{ prompt_id: 'gp_1', stable, candidate, reference: 'stable', score: 1, detail: null, pass: true }],
    totals: { prompts: 1, passed: 1, failed: 0, unscored: 0, candidate_errors: 0, stable_errors: 0 },
  } as unknown as EvalReport;
}

describe('redactReport (the eval store holds redacted outputs)', () => {
  it('redacts both sides’ outputs and error messages, and keeps the scores', () => {
    const out = redactReport(report(side('reach me at jane@example.com'), side('card 4111 1111 1111 1111', { code: 'upstream_error', message: 'key sk-proj-Zx9Qp2Lm7Rt4Vb8Nc1Kd6Hs3 refused' })));
    expect(out.prompts[0].stable.output).toBe('reach me at [REDACTED:EMAIL]');
    expect(out.prompts[0].candidate.output).toBe('card [REDACTED:CARD]');
    expect(out.prompts[0].candidate.error?.message).toBe('key [REDACTED:SECRET] refused');
    expect(out.prompts[0]).toMatchObject({ score: 1, pass: true });
    expect(JSON.stringify(out)).not.toMatch(/jane@|4111|sk-proj/);
  });

  it('withholds an output whose redaction fails', () => {
    const failing: Redactor = { profile: 'x', redact: () => ({ ok: false, reason: 'timeout' }), redactChunked: async () => ({ ok: false, reason: 'timeout' }) };
    const out = redactReport(report(side('jane@example.com'), side('')), failing);
    expect(out.prompts[0].stable.output).toBe(WITHHELD_OUTPUT);
    expect(out.prompts[0].candidate.output).toBe('');
  });
});

describe('redactGoldenPromptForAudit (the audit copy of a golden prompt)', () => {
  const prompt: GoldenPrompt = {
    id: 'gp_1',
    tenant_id: 'acme',
    use_case: 'support',
    messages: [
      { role: 'system', content: 'you help jane@example.com' },
      { role: 'user', content: 'card 4111 1111 1111 1111' },
    ],
    max_tokens: 8,
    output_schema: { type: 'object', properties: { to: { const: 'bob@example.org' } }, required: ['to'] },
    expected: 'key AKIAIOSFODNN7EXAMPLE',
    created_at: '2026-01-01T00:00:00.000Z',
  };

  it('redacts messages, expected and the schema’s string values; keeps ids, roles, keys and numbers', () => {
    const out = redactGoldenPromptForAudit(prompt);
    expect(out).toEqual({
      ...prompt,
      messages: [
        { role: 'system', content: 'you help [REDACTED:EMAIL]' },
        { role: 'user', content: 'card [REDACTED:CARD]' },
      ],
      output_schema: { type: 'object', properties: { to: { const: '[REDACTED:EMAIL]' } }, required: ['to'] },
      expected: 'key [REDACTED:SECRET]',
    });
    // The prompt itself is untouched.
    expect(prompt.messages[0].content).toBe('you help jane@example.com');
  });

  it('withholds texts whose redaction fails', () => {
    const failing: Redactor = { profile: 'x', redact: () => ({ ok: false, reason: 'error' }), redactChunked: async () => ({ ok: false, reason: 'error' }) };
    const out = redactGoldenPromptForAudit(prompt, failing);
    expect(out.messages.map((m) => m.content)).toEqual([WITHHELD_TEXT, WITHHELD_TEXT]);
    expect(out.expected).toBe(WITHHELD_TEXT);
    expect(JSON.stringify(out)).not.toMatch(/jane@|4111|AKIA|bob@/);
  });
});
