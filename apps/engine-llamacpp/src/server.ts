// The engine server moved to @weir/engine-server (shared with apps/engine-sim); re-exported so this app's imports stay put.
export { createEngineServer, type EngineServerOptions } from '@weir/engine-server';
