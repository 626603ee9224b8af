package pool

var TakeWith = take

var RetryAPI = retryAPI

var ConsumerConfig = consumerConfig
