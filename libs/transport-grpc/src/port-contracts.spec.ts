/**
 * Every port's contract suite, run against the in-process implementation and against the
 * gRPC client talking over loopback to a gRPC server that wraps the same implementation.
 */
import { createInMemoryAdmission } from '@weir/admission';
import { systemClock } from '@weir/core';
import { createStaticRouter } from '@weir/routing';
import { createPoolScheduler } from '@weir/scheduling';
import { createRelay } from '@weir/streaming';
import { describeAdmissionContract, describeRelayContract, describeRouterContract, describeSchedulerContract, createRecordingSettlements } from '@weir/testing';
import {
  createAdmissionGrpcClient,
  createAdmissionGrpcServer,
  createRelayGrpcClient,
  createRelayGrpcServer,
  createRouterGrpcClient,
  createRouterGrpcServer,
  createSchedulerGrpcClient,
  createSchedulerGrpcServer,
  startGrpcServer,
} from './index';


describeRouterContract('in-process', async (config) => ({ service: createStaticRouter(config) }));
describeRouterContract('gRPC loopback', async (config) => {
  const server = await startGrpcServer({ services: [createRouterGrpcServer(createStaticRouter(config))] });
  const client = createRouterGrpcClient({ address: server.address });
  return { service: client, close: async () => (client.close(), server.close()) };
});

describeAdmissionContract('in-process', async (tenants, { clock }) => ({ service: createInMemoryAdmission({ tenants, now: clock.now }) }));
describeAdmissionContract('gRPC loopback', async (tenants, { clock }) => {
  const server = await startGrpcServer({ services: [createAdmissionGrpcServer(createInMemoryAdmission({ tenants, now: clock.now }))] });
  const client = createAdmissionGrpcClient({ address: server.address });
  return { service: client, close: async () => (client.close(), server.close()) };
});

describeSchedulerContract('in-process', async (t) => ({
  service: createPoolScheduler({ replicas: t.replicas, maxQueuePerReplica: t.maxQueuePerReplica, settings: t.settings, clock: systemClock }),
}));
describeSchedulerContract('gRPC loopback', async (t) => {
  const impl = createPoolScheduler({ replicas: t.replicas, maxQueuePerReplica: t.maxQueuePerReplica, settings: t.settings, clock: systemClock });
  const server = await startGrpcServer({ services: [createSchedulerGrpcServer(impl)] });
  const client = createSchedulerGrpcClient({ address: server.address });
  return { service: client, close: async () => (client.close(), server.close()) };
});

describeRelayContract('in-process', async (deps) => ({
  service: createRelay({
    engineFor: (id) => (id === deps.replicaId ? deps.engine : undefined),
    settlements: createRecordingSettlements(),
    clock: systemClock,
    cancelGraceMs: deps.cancelGraceMs,
  }),
}));
describeRelayContract('gRPC loopback', async (deps) => {
  const impl = createRelay({
    engineFor: (id) => (id === deps.replicaId ? deps.engine : undefined),
    settlements: createRecordingSettlements(),
    clock: systemClock,
    cancelGraceMs: deps.cancelGraceMs,
  });
  const server = await startGrpcServer({ services: [createRelayGrpcServer(impl)] });
  const client = createRelayGrpcClient({ address: server.address });
  return { service: client, close: async () => (client.close(), server.close()) };
});
