export * from './errors';
export * from './prng';
export * from './distribution';
export * from './profile';
export * from './replica';
export * from './stats';
export * from './simulate';
export * from './plan';
