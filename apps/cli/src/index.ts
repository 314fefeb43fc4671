export * from './args';
export * from './run';
export { runAdminCommand, formatApiError, type AdminIo } from './admin/run-admin';
export { ADMIN_COMMANDS, DEFAULT_ADMIN_URL, DEFAULT_API_URL, parseAdminCommandLine, type AdminInvocation } from './admin/parse';
export { ApiError, createJsonClient, type FetchFn, type JsonClient } from './admin/http';
export type { CommandContext, CommandResult, CommandSpec, FlagSpec } from './admin/command';
