export * from './sim-server';
export * from './profile-env';
